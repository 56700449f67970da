"""Scratch A/B of the packed linears' scheduling inside real passes: python lab.py LEVEL T S ROUNDS [bench args]
Alternates TF_SCRATCH_STATIC (at::parallel_for halves) and stealing (parallel_runs) every 15 passes."""
import sys, time, os, argparse, statistics, torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
level_name, T, S, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ap = argparse.ArgumentParser(); sub = ap.add_subparsers(); add_bench_parser(sub)
args = ap.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                      "--middle-weights", "int4", "--contexts", str(S)] + sys.argv[5:])
torch.set_num_threads(2)
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + T + 1)
    level = built_levels(engine, run, ids, S)[level_name]
    x = torch.tensor([ids[S - T + 1:S + 1]])
    n = level.cache.get_seq_length()
    res = {"static": [], "steal": []}
    for r in range(rounds):
        for v in (("static", "steal") if r % 2 == 0 else ("steal", "static")):
            if v == "static": os.environ["TF_SCRATCH_STATIC"] = "1"
            else: os.environ.pop("TF_SCRATCH_STATIC", None)
            ts = []
            for _ in range(15):
                t0 = time.perf_counter(); level.model(x, level.cache); ts.append(time.perf_counter() - t0); level.cache.crop(n)
            res[v].append(statistics.median(ts[2:]))
    for v, xs in res.items():
        print(f"{level_name} T={T} S={S} {v}: median of round medians {statistics.median(xs)*1e3:.3f} ms, min {min(xs)*1e3:.3f} ({len(xs)} rounds)")
