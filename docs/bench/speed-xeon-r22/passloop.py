"""A loop of one level's T-token passes for perf record -p (prints READY after set-up).
usage: [LEVEL=target|retrieval|drafter] passloop.py S T fp32|bf16 SECONDS [bench flags]"""
import sys, time, argparse, torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
S = int(sys.argv[1]); T = int(sys.argv[2]); dt = sys.argv[3]; secs = float(sys.argv[4])
extra = sys.argv[5:]
parser = argparse.ArgumentParser(); sub = parser.add_subparsers(dest="command"); add_bench_parser(sub)
args = parser.parse_args(["bench", "--suite", "passes", "--contexts", str(S), "--dtypes", dt, "--threads", "2", "--corpus", "essays", "--levels", "target", *extra])
torch.set_num_threads(2)
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 1)
    lv = built_levels(engine, run, ids, S)[__import__("os").environ.get("LEVEL", "target")]
    x = torch.tensor([ids[S - T + 1:S + 1]])
    n = lv.cache.get_seq_length()
    for _ in range(3): lv.model(x, lv.cache); lv.cache.crop(n)
    print("READY", flush=True)
    t_end = time.time() + secs; k = 0; t0 = time.perf_counter()
    while time.time() < t_end:
        lv.model(x, lv.cache); lv.cache.crop(n); k += 1
    print(f"{(time.perf_counter()-t0)/k*1e3:.2f} ms/pass over {k}", flush=True)
