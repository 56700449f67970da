"""Batched triforce: the batcher's next group by the bytes a pass reads (this round) against
by the target's shape (before: the int4 middle level tied with the target), side by side in
one process: python ab_order.py CONTEXT NEW_TOKENS B REPEATS. bf16, essays, greedy, --gamma auto."""
import argparse, collections, statistics, sys
import torch
from triforce.runtime import decode_batched as db
from triforce.runtime.bench.batch import run_one
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new_tokens, b, repeats = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new_tokens, retrieval_budget=1024, gamma="auto")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), b * context)
prompts = [ids[i * context:(i + 1) * context] for i in range(b)]
own = db.Batcher.weight_bytes


def shape_cost(self, model):   # before: layers x width^2, the same for the target and its int4 copy
    c = model.cfg
    return c.num_layers * (c.hidden_size ** 2 + 3 * c.hidden_size * c.intermediate_size)


sides = {"by shape (before)": shape_cost, "by weight bytes (after)": own}
tokens = None
tps, packing = collections.defaultdict(list), collections.defaultdict(list)
for rep in range(repeats + 1):
    for name, cost in sides.items():
        db.Batcher.weight_bytes = cost
        r = run_one(engine, prompts, run)
        tokens = tokens if rep or name != "by shape (before)" else r["token_ids"]
        assert r["token_ids"] == tokens, "greedy tokens differ between the sides"
        if rep:
            tps[name].append(r["tokens_per_s"])
            packing[name].append({k: round(r["packed_rows"][k] / v, 2) for k, v in r["passes"].items()})
db.Batcher.weight_bytes = own
for name in sides:
    print(f"B={b} {name}: decode tok/s {tps[name]} (median {statistics.median(tps[name]):.1f}); "
          f"sequences per pass {packing[name]}", flush=True)
