"""triforce at CONTEXT with --gamma auto against fixed (γ1, γ2), round-robin in one process:
python gammas32k.py CONTEXT NEW ROPE REPEATS T g1,g2 g1,g2 ..."""
import argparse, dataclasses, statistics, sys
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.bench.measure import generate_unstopped
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, rope, reps, T = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
fixed = [tuple(int(x) for x in g.split(",")) for g in sys.argv[6:]]
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, gamma="auto", temperature=T, rope_scaling=None if rope == "none" else rope)
engine = Engine(base, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
configs = {"auto": base} | {f"{g[0]},{g[1]}": dataclasses.replace(base, gamma="fixed", gamma1=g[0], gamma2=g[1]) for g in fixed}
generate_unstopped(engine, ids, base)
ms = {k: [] for k in configs}
for rep in range(reps):
    for name, run in configs.items():
        r = generate_unstopped(engine, ids, dataclasses.replace(run, seed=rep))
        ms[name].append(1e3 * r.stats["decode_s"] / new)
        extra = r.stats.get("gamma", {}).get("rounds_per_choice", "") if name == "auto" else ""
        print(f"rep {rep} {name}: {ms[name][-1]:.2f} ms/token {extra}", flush=True)
for name, v in ms.items():
    print(f"{name}: median {statistics.median(v):.2f} ms/token  all {[round(x, 1) for x in v]}")
