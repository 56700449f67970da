"""--gamma auto in batched decoding: a level's pass priced at the packed pass's own time (this
round) against the wall time of the call, which also waited for other sequences' passes on other
weights (before), side by side in one process: python ab.py CONTEXT NEW_TOKENS B REPEATS.
bf16, essays (B consecutive passages), greedy triforce, --gamma auto, fixed batch of B."""
import argparse, collections, statistics, sys
import torch
from triforce.runtime import decode_batched as db
from triforce.runtime.bench.batch import run_one
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new_tokens, b, repeats = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new_tokens, retrieval_budget=1024)
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), b * context)
prompts = [ids[i * context:(i + 1) * context] for i in range(b)]
own_pass = db.SequenceModel.__call__


def call_wall(self, tokens, cache, last_only=False):   # before: the call's wall time prices the pass
    out = own_pass(self, tokens, cache, last_only)
    self.last_seconds = None
    return out


sides = {"call's wall time (before)": call_wall, "packed pass's own time (after)": own_pass}
tps = collections.defaultdict(list)
for rep in range(repeats + 1):
    for name, call in sides.items():
        db.SequenceModel.__call__ = call
        r = run_one(engine, prompts, run)
        if rep:
            tps[name].append(r["tokens_per_s"])
db.SequenceModel.__call__ = own_pass
for name in sides:
    print(f"B={b} {name}: decode tok/s {tps[name]} (median {statistics.median(tps[name]):.1f})", flush=True)
