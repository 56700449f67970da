"""Batched decoding's packed passes in one native call (DecoderPlan.run_packed) against the layer-by-
layer path they took before (PackedCache without slots_each), side by side in one process:
python ab.py CONTEXT NEW_TOKENS REPEATS. bf16, essays (B consecutive passages), greedy, --gamma auto."""
import argparse, dataclasses, statistics, sys
import torch
from triforce.runtime.bench.batch import run_one
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.cache_packed import PackedCache
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new_tokens, repeats = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new_tokens, retrieval_budget=1024)
engine = Engine(base)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), 4 * context)
prompts = [ids[i * context:(i + 1) * context] for i in range(4)]
one_call = PackedCache.slots_each
paths = {"layer by layer (before)": lambda self: None, "one native call (after)": one_call}
results = {}
for mode in ("ar", "triforce"):
    run = dataclasses.replace(base, mode=mode)
    for b in (1, 4):
        for rep in range(repeats + 1):          # the first round warms up
            for name, slots_each in paths.items():
                PackedCache.slots_each = slots_each
                r = run_one(engine, prompts[:b], run)
                if rep:
                    results.setdefault((mode, b, name), []).append(r["tokens_per_s"])
                    results.setdefault((mode, b, name, "packed"), []).append(r["target_packed_rows"] / r["target_passes"])
        for name in paths:
            tps = results[(mode, b, name)]
            print(f"{mode} B={b} {name}: decode tok/s {tps} (median {statistics.median(tps):.1f}); "
                  f"sequences per target-weight pass {statistics.mean(results[(mode, b, name, 'packed')]):.2f}", flush=True)
PackedCache.slots_each = one_call
