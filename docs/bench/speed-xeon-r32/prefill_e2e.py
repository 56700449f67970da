"""Target prefill time of an essays prompt: python prefill_e2e.py CONTEXT ROPE|none REPS"""
import argparse, sys, time, torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, rope, reps = int(sys.argv[1]), None if sys.argv[2] == "none" else sys.argv[2], int(sys.argv[3])
torch.set_num_threads(2)
run = RunConfig(mode="ar", dtype="bf16", max_new_tokens=1, temperature=0.0, rope_scaling=rope)
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
for _ in range(reps):
    t0 = time.perf_counter(); r = engine.generate(ids, run); t = time.perf_counter() - t0
    print(f"{context} tokens: prefill {r.stats['prefill_s']:.2f} s ({r.stats['prefill_tokens_per_s']} tokens/s), request {t:.2f} s", flush=True)
