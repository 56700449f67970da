"""Profile generate_batch (ar or triforce, B sequences of CONTEXT tokens, NEW tokens): python prof_batch.py MODE B CONTEXT NEW"""
import argparse, cProfile, dataclasses, pstats, sys, time
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.decode_batched import generate_batch
from triforce.runtime.engine import Engine
mode, B, context, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(2)
run = RunConfig(mode=mode, dtype="bf16", max_new_tokens=new, gamma="auto" if mode == "triforce" else "fixed")
engine = Engine(dataclasses.replace(run, mode="triforce"), keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context * B)
prompts = [ids[i * context:(i + 1) * context] for i in range(B)]
generate_batch(engine, [prompts[0][:256]], [dataclasses.replace(run, max_new_tokens=4)])
for rep in range(2):
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    if rep: prof.enable()
    out = generate_batch(engine, prompts, [run] * B)
    if rep: prof.disable()
    ends = [r.stats["prefill_s"] + r.stats["decode_s"] for r in out.results]
    dw = max(ends) - max(r.stats["prefill_s"] for r in out.results)
    print(f"rep {rep}: decode wall {dw:.2f} s, {B*new/dw:.1f} tok/s, passes {out.passes}, rows {out.packed_rows}", flush=True)
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
