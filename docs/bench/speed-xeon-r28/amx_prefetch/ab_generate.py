"""In-process A/B of a scratch switch in a native module, end to end: `ar` and `triforce` requests
(bf16, essays, --gamma auto, greedy) at CONTEXT, decode ms/token, off and on alternated.
    ab_generate.py MODULE SETTER CONTEXT NEW REPEATS [ROPE_SCALING|none] [BUDGET|auto]
BUDGET: the retrieval budget, 1024 unless given (round 28's runs); auto = what `triforce generate` picks (round 30)."""
import argparse, collections, statistics, sys
import torch
from triforce.runtime import native
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
module, setter, context, new, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(2)
rope = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] != "none" else None
budget = sys.argv[7] if len(sys.argv) > 7 else "1024"
runs = {m: RunConfig(mode=m, dtype="bf16", max_new_tokens=new, retrieval_budget=None if budget == "auto" else int(budget), rope_scaling=rope,
                     gamma="auto" if m == "triforce" else "fixed")
        for m in ("ar", "triforce")}
engine = Engine(runs["triforce"], keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
switch = getattr(getattr(native, module)(), setter)
ms, tokens = collections.defaultdict(list), {}
for rep in range(reps + 1):
    for mode, run in runs.items():
        for c in ((0, 1) if rep % 2 else (1, 0)):
            switch(bool(c))
            r = engine.generate(ids, run)
            assert tokens.setdefault(mode, r.token_ids) == r.token_ids
            if rep:
                ms[(mode, c)].append(1e3 * r.stats["decode_s"] / len(r.token_ids))
for mode in runs:
    off, on = ms[(mode, 0)], ms[(mode, 1)]
    print(f"{mode} {context}: off median {statistics.median(off):.2f} min {min(off):.2f} | on median {statistics.median(on):.2f} "
          f"min {min(on):.2f} ms/token | on faster in {sum(b < a for a, b in zip(off, on))}/{len(off)} pairs", flush=True)
