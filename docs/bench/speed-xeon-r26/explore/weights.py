# Teacher-forced agreement of the middle level with the target: context new-tokens budgets [weight kinds] [temperatures]
import torch
import argparse, dataclasses, sys
from triforce.runtime.bench.lower import middle_logits, teacher_forced
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
context, new = int(sys.argv[1]), int(sys.argv[2]); budgets = [int(b) for b in sys.argv[3].split(",")]
kinds = sys.argv[4].split(",") if len(sys.argv) > 4 else ["int4", "int8", "same"]   # middle-level weights
temps = [float(t) for t in sys.argv[5].split(",")] if len(sys.argv) > 5 else [0.0]
torch.set_num_threads(2)
run = RunConfig(mode="ar", dtype="bf16", rope_scaling="yarn:4" if context > 8000 else None)
engine = Engine(run, keep_prefill=True)
models = {k: engine.model if k == "same" else lower_level_copy(engine.model, k) for k in kinds}
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
with torch.inference_mode():
  for temperature in temps:
    params = SamplingParams(temperature=temperature, top_p=0.9)
    request = dataclasses.replace(run, temperature=temperature, max_new_tokens=new, top_p=0.9)
    target, seq, tl = teacher_forced(engine, request, ids)
    n, p = len(seq) - len(ids), probs_from_logits(tl, params)
    for B in budgets:
      for wname, model in models.items():
        lg = middle_logits(engine, dataclasses.replace(request, retrieval_budget=B), model, target, ids, seq)
        q = probs_from_logits(lg, params)
        agree = (lg.argmax(-1) == tl.argmax(-1)).float()
        print(f"ctx {context} T {temperature} budget {B} {wname}: greedy agreement {agree.mean():.3f} (first half {agree[:n//2].mean():.3f}, second {agree[n//2:].mean():.3f}) expected acceptance {torch.minimum(p, q).sum(-1).mean():.3f}", flush=True)
