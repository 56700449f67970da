import sys, time, argparse, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
torch.set_num_threads(2)
S = int(sys.argv[1])
ap = argparse.ArgumentParser(); sub = ap.add_subparsers(dest="command")
from triforce.runtime.bench import add_bench_parser
add_bench_parser(sub)
args = ap.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                      "--budget", "1024", "--middle-weights", "int4", "--rope-scaling", "yarn:4", "--contexts", str(S)])
torch.inference_mode().__enter__()
run = base_run(args, mode="triforce", temperature=0.0)
engine = Engine(run)
ids = prompt_ids(engine, args, S + 20)
lv = built_levels(engine, run, ids, S)
level = lv["target"]; n = level.cache.get_seq_length()
for rep in range(3):
    out = []
    for T in (1, 1, 2, 4, 5, 6, 8, 12, 13):
        x = torch.zeros(1, T, dtype=torch.long)
        t = time.perf_counter(); level.model(x, level.cache); out.append(f"{T}:{(time.perf_counter() - t) * 1e3:.1f}"); level.cache.crop(n)
    print("sequence", rep, " ".join(out), flush=True)
