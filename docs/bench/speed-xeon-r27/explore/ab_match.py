"""End to end with the target's least copy match at 8 (round 26) against lower ones, round-robin."""
import argparse, dataclasses, sys, statistics
import torch
from triforce.runtime import speculate
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, repeats = int(sys.argv[1]), int(sys.argv[2]); variants = [int(v) for v in sys.argv[3].split(",")]
temps = [float(t) for t in sys.argv[4].split(",")] if len(sys.argv) > 4 else [0.0, 0.6]
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=128, gamma="auto", retrieval_budget=1024,
                 rope_scaling="yarn:4" if context > 8000 else None)
engine = Engine(base, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
for T in temps:
    ms = {v: [] for v in variants}; cp = {v: [0, 0] for v in variants}
    for rep in range(repeats + 1):
        for v in variants:
            speculate.TARGET_MATCH = v
            res = engine.generate(ids, dataclasses.replace(base, temperature=T, top_p=0.9, seed=rep))
            if rep == 0: continue
            ms[v].append(res.stats["ms_per_token"])
            t = res.stats["levels"]["target"]; cp[v][0] += t["copied_accepted"]; cp[v][1] += t["copied"]
    for v in variants:
        print(f"ctx {context} T {T} target match {v}: ms/token {ms[v]} median {statistics.median(ms[v]):.2f}; target copies {cp[v][0]}/{cp[v][1]}", flush=True)
