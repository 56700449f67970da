# Round 38: the retrieval level and the target timed in the probe order on random K/V (built_levels); usage: python probe_order.py 32000
# Round 38: is the first pass of a new length slow? Times the retrieval level's (and the target's) passes in
# the order the --gamma auto probe takes them (warm-up T = 1, then 1, 2, 4, 5), then again.
import argparse, sys, statistics, torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.engine import Engine
from triforce.runtime.gamma import pass_seconds
S = int(sys.argv[1]) if len(sys.argv) > 1 else 8000
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--contexts", str(S),
                     "--corpus", "essays"] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 1)
    levels = built_levels(engine, run, ids, S)
    for name in ("retrieval", "target"):
        lv = levels[name]
        order = [1, 1, 2, 4, 5] if name == "retrieval" else [1, 1, 13, 5, 6, 2]
        for rnd in range(3):
            print(name, "round", rnd, " ".join(f"T{T}:{1000 * pass_seconds(lv, T):.1f}" for T in order), flush=True)
