"""`ar` and `triforce` at several retrieval budgets side by side (measure_side_by_side, round-robin),
bf16, essays, --gamma auto. python ab_budget.py CONTEXT NEW REPEATS ROPE|none TEMPS BUDGETS..."""
import argparse, dataclasses, json, sys
import torch
from triforce.runtime.bench.measure import measure_side_by_side
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rope = None if sys.argv[4] == "none" else sys.argv[4]
temps = [float(t) for t in sys.argv[5].split(",")]
budgets = [int(b) for b in sys.argv[6:]]
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, rope_scaling=rope, gamma="auto")
engine = Engine(base, keep_prefill=True)
import os
ids = prompt_ids(engine, argparse.Namespace(prompt_file=os.environ.get("PROMPT"), corpus="essays"), context)
out = []
for T in temps:
    runs = [dataclasses.replace(base, mode="ar", gamma="fixed", temperature=T)] + \
           [dataclasses.replace(base, retrieval_budget=b, temperature=T) for b in budgets]
    rows = measure_side_by_side(engine, ids, runs, reps)
    ar = rows[0]["ms_per_token"]["median"]
    for run, row in zip(runs, rows):
        b = run.retrieval_budget if run.mode == "triforce" else "-"
        print(f"T={T} {run.mode} budget {b}: {row['ms_per_token']['median']:.1f} ms/token {row['ms_per_token']['all']} "
              f"x ar {ar / row['ms_per_token']['median']:.2f} tok/pass {row['tokens_per_target_pass']} acc {row['acceptance']} "
              f"copied {row['copied']}", flush=True)
        out.append(dict(row, budget=b))
json.dump(out, open(f"budget_{context}.json", "w"), indent=1)
