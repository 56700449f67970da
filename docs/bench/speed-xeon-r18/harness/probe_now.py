import sys, time, argparse, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime.gamma import probe_pass_costs
torch.set_num_threads(2)
S = int(sys.argv[1])
ap = argparse.ArgumentParser(); sub = ap.add_subparsers(dest="command")
from triforce.runtime.bench import add_bench_parser
add_bench_parser(sub)
args = ap.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                      "--budget", "1024", "--middle-weights", "int4", "--draft-weights", "int4", "--draft-vocab", "4096",
                      "--rope-scaling", "yarn:4", "--contexts", str(S)])
torch.inference_mode().__enter__()
run = base_run(args, mode="triforce", temperature=0.0)
engine = Engine(run)
ids = prompt_ids(engine, args, S + 20)
lv = built_levels(engine, run, ids, S)
for rep in range(2):
    t = time.perf_counter(); costs = probe_pass_costs([lv["drafter"], lv["retrieval"], lv["target"]], (4, 12)); dt = time.perf_counter() - t
    print(f"probe {rep}: {dt:.2f} s", "target", {T: round(s * 1e3, 1) for T, s in costs[2].points}, "middle", {T: round(s * 1e3, 1) for T, s in costs[1].points}, flush=True)
