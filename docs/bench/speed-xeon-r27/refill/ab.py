"""Continuous batching (generate_batch's slots refill as sequences finish) against fixed batches,
side by side in one process: N prompts, B slots, against N / B calls of B prompts each.
python ab.py CONTEXT NEW_TOKENS N B REPEATS [mixed]. bf16, essays (N consecutive passages), greedy.
mixed: prompt i asks for NEW_TOKENS x (1, 8, 2, 4)[i % 4] / 8 tokens (records of different lengths)."""
import argparse, dataclasses, statistics, sys, time
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
import triforce.runtime.decode_batched as _db  # (generate_batch looked up at call time: diagnostics may wrap it)
from triforce.runtime.engine import Engine
context, new_tokens, n, b, repeats = (int(a) for a in sys.argv[1:6])
lengths = [new_tokens * (1, 8, 2, 4)[i % 4] // 8 if sys.argv[6:] == ["mixed"] else new_tokens for i in range(n)]
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=max(lengths), retrieval_budget=1024)
engine = Engine(base)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), n * context)
prompts = [ids[i * context:(i + 1) * context] for i in range(n)]


def fixed(run):
    out = []
    for start in range(0, n, b):
        o = _db.generate_batch(engine, prompts[start:start + b], runs(run)[start:start + b])
        out.append(o)
    return [r for o in out for r in o.results], sum(o.passes["target"] for o in out), sum(o.packed_rows["target"] for o in out)


def runs(run):
    return [dataclasses.replace(run, max_new_tokens=m) for m in lengths]


def refill(run):
    o = _db.generate_batch(engine, prompts, runs(run), slots=b)
    return o.results, o.passes["target"], o.packed_rows["target"]


_db.generate_batch(engine, [prompts[0][:256]] * 2, [dataclasses.replace(base, max_new_tokens=4)] * 2)   # warm-up
for mode in ("ar", "triforce"):
    run = dataclasses.replace(base, mode=mode)
    walls, tokens = {"fixed": [], "refill": []}, {}
    for rep in range(repeats):
        for name, fn in (("fixed", fixed), ("refill", refill)):
            start = time.perf_counter()
            results, passes, rows = fn(run)
            walls[name].append(time.perf_counter() - start)
            ids_out = [r.token_ids for r in results]
            assert tokens.setdefault(rep, ids_out) == ids_out, "refill changed a sequence's tokens"
            print(f"{mode} {name}: {n} prompts of {context}, B={b}: wall {walls[name][-1]:.1f} s, "
                  f"{sum(map(len, ids_out)) / walls[name][-1]:.1f} generated tok/s over the wall, "
                  f"target-weight passes {passes}, sequences per pass {rows / passes:.2f}", flush=True)
    pairs = [f / r for f, r in zip(walls["fixed"], walls["refill"])]
    print(f"{mode}: fixed / refill wall per repeat {[round(p, 3) for p in pairs]}", flush=True)
