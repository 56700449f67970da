"""Teacher-forced middle-level agreement by distance from the selection point (lower suite's protocol).
python decay.py CONTEXT NEW BUDGET ROPE T"""
import argparse, dataclasses, sys
import torch
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
context, new, budget, rope, T = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
torch.set_num_threads(2)
run = RunConfig(mode="ar", dtype="bf16", max_new_tokens=new, rope_scaling=None if rope == "none" else rope,
                retrieval_budget=budget, temperature=T)
engine = Engine(run, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
model = lower_level_copy(engine.model, "int4")
with torch.inference_mode():
    target, seq, tl = teacher_forced(engine, run, ids)
    ml = middle_logits(engine, run, model, target, ids, seq)[0]
params = SamplingParams(temperature=T, top_p=0.9)
acc = torch.minimum(probs_from_logits(tl, params), probs_from_logits(ml, params)).sum(-1)
agree = (tl.argmax(-1) == ml.argmax(-1)).float()
for i in range(0, len(acc), 32):
    print(f"positions {i}-{i+31}: agreement {agree[i:i+32].mean():.3f} expected acceptance {acc[i:i+32].mean():.3f}")
