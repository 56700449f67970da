"""Each pass of a triforce request in situ: its level, T, ms, and how many passes of other
levels ran since this level's last pass (0: it follows itself). python insitu.py CONTEXT NEW REPEATS"""
import argparse, collections, statistics, sys, time
import torch
from triforce.runtime import speculate
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, repeats = (int(a) for a in sys.argv[1:4])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, retrieval_budget=1024, gamma="auto")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
log, own = [], speculate.pass_timed


def logged(forward, part, cache, last_only):
    out, s = own(forward, part, cache, last_only=last_only)
    log.append((type(cache).__name__, part.shape[1], s * 1e3))
    return out, s


speculate.pass_timed = logged
for rep in range(repeats + 1):
    log.clear()
    r = engine.generate(ids, run)
    if rep == 0:
        continue
    by = collections.defaultdict(list)
    prev = None
    for name, T, ms in log:
        by[(name, T, "after itself" if prev == name else f"after {prev}")].append(ms)
        prev = name
    print(f"repeat {rep}: {r.stats['decode_s']:.3f} s decode")
    for key in sorted(by, key=str):
        v = by[key]
        if len(v) >= 3:
            print(f"  {key}: n={len(v)} median {statistics.median(v):.2f} min {min(v):.2f} ms")
