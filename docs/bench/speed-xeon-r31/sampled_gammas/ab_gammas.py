"""Sampled `triforce` requests (bf16, essays, T = 0.6, top-p 1) with fixed gammas against --gamma auto, every
setting in turn in one process, REPEATS rounds: decode ms/token and tokens per target pass.
    ab_gammas.py CONTEXT NEW REPEATS ROPE|none G1,G2 [G1,G2 ...]   (auto is always included)"""
import argparse, collections, statistics, sys
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rope = None if sys.argv[4] == "none" else sys.argv[4]
torch.set_num_threads(2)
base = dict(mode="triforce", dtype="bf16", max_new_tokens=new, rope_scaling=rope, temperature=0.6)
runs = {"auto": RunConfig(**base, gamma="auto")}
for g in sys.argv[5:]:
    g1, g2 = map(int, g.split(","))
    runs[g] = RunConfig(**base, gamma="fixed", gamma1=g1, gamma2=g2)
engine = Engine(runs["auto"], keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
ms, tpp = collections.defaultdict(list), collections.defaultdict(list)
for rep in range(reps + 1):
    order = list(runs) if rep % 2 else list(reversed(runs))
    for name in order:
        r = engine.generate(ids, RunConfig(**{**runs[name].__dict__, "seed": rep}))
        if rep:
            ms[name].append(1e3 * r.stats["decode_s"] / len(r.token_ids))
            tpp[name].append(r.stats["tokens_per_target_pass"])
for name in runs:
    print(f"{context} T=0.6 {name:>6}: median {statistics.median(ms[name]):6.2f} ms/token (min {min(ms[name]):6.2f}, "
          f"max {max(ms[name]):6.2f}); tokens/target pass {statistics.median(tpp[name]):.2f}", flush=True)
