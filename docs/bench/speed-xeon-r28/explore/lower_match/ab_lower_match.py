"""The lower levels' least match for a context-lookup copy (speculate.NGRAM, 3), against longer ones,
side by side in one process: `triforce` requests (bf16, essays, --gamma auto) at CONTEXT, greedy and
T = 0.6 (seed: the repeat's number, the same for every side), decode ms/token, the sides alternated. python ab_lower_match.py CONTEXT NEW REPEATS M,M.. [ROPE|none] [T,T..]"""
import argparse, collections, dataclasses, statistics, sys
import torch
from triforce.runtime import speculate
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
matches = [int(m) for m in sys.argv[4].split(",")]
rope = sys.argv[5] if len(sys.argv) > 5 and sys.argv[5] != "none" else None
torch.set_num_threads(2)
runs = {t: RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, retrieval_budget=1024, rope_scaling=rope,
                     gamma="auto", temperature=t, top_p=0.9, seed=0) for t in [float(x) for x in (sys.argv[6] if len(sys.argv) > 6 else "0,0.6").split(",")]}
engine = Engine(next(iter(runs.values())), keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
ms, copies = collections.defaultdict(list), collections.defaultdict(list)
for rep in range(reps + 1):
    for t, run in runs.items():
        for m in (matches if rep % 2 else matches[::-1]):
            speculate.NGRAM = m
            r = engine.generate(ids, dataclasses.replace(run, seed=rep))   # each repeat its own seed (T > 0: its own text)
            if rep:
                ms[(t, m)].append(1e3 * r.stats["decode_s"] / len(r.token_ids))
                lv = r.stats["levels"]["retrieval"]
                copies[(t, m)].append((lv["copied_accepted"], lv["copied"]))
speculate.NGRAM = 3
for t in runs:
    print(f"T={t}: " + " | ".join(f"min match {m}: median {statistics.median(ms[(t, m)]):.2f} ms/token "
                                  f"(all {[round(x, 1) for x in ms[(t, m)]]}), middle copies {copies[(t, m)]}" for m in matches), flush=True)
