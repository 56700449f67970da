import torch
import argparse, dataclasses, sys, time
import triforce.runtime.cache_retrieval as CR
from triforce.runtime.bench.lower import middle_logits, teacher_forced
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
context, new, budget = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
corpus = sys.argv[4] if len(sys.argv) > 4 else "essays"
torch.set_num_threads(2)
run = RunConfig(mode="ar", dtype="bf16", rope_scaling="yarn:4" if context > 8000 else None)
engine = Engine(run, keep_prefill=True)
model = lower_level_copy(engine.model, "int4")
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus=corpus), context)
mean_scores = CR.chunk_scores
def mass_scores(keys, query, chunk):
    B, Hkv, S, D = keys.shape
    q = query.float().view(B, Hkv, -1, D)
    logits = torch.einsum("bhgd,bhsd->bhgs", q, keys.float()) * D ** -0.5
    p = logits.softmax(-1)                                     # per query head
    return p.view(B, Hkv, q.shape[2], S // chunk, chunk).sum((2, 4))
def max_scores(keys, query, chunk):
    B, Hkv, S, D = keys.shape
    q = query.float().view(B, Hkv, -1, D)
    logits = torch.einsum("bhgd,bhsd->bhgs", q, keys.float())
    return logits.view(B, Hkv, q.shape[2], S // chunk, chunk).amax(4).amax(2)
def logmass_scores(keys, query, chunk):   # sum over heads of log of chunk mass: every head's interest counts
    B, Hkv, S, D = keys.shape
    q = query.float().view(B, Hkv, -1, D)
    logits = torch.einsum("bhgd,bhsd->bhgs", q, keys.float()) * D ** -0.5
    p = logits.softmax(-1).view(B, Hkv, q.shape[2], S // chunk, chunk).sum(4)
    return p.amax(2)
variants = [("mean", mean_scores, None), ("mass", mass_scores, None), ("max", max_scores, None),
            ("headmax-mass", logmass_scores, None),
            ("mean r128", mean_scores, 128), ("mean r512", mean_scores, 512), ("mass r128", mass_scores, 128), ("mass r512", mass_scores, 512)]
with torch.inference_mode():
  for temperature in (0.0, 0.6):
    params = SamplingParams(temperature=temperature, top_p=0.9)
    request = dataclasses.replace(run, temperature=temperature, max_new_tokens=new, retrieval_budget=budget)
    target, seq, tl = teacher_forced(engine, request, ids)
    n, p = len(seq) - len(ids), probs_from_logits(tl, params)
    for name, fn, recent in variants:
        CR.chunk_scores = fn
        r = dataclasses.replace(request, retrieval_recent=recent)
        lg = middle_logits(engine, r, model, target, ids, seq); q = probs_from_logits(lg, params)
        agree = (lg.argmax(-1) == tl.argmax(-1)).float()
        acc = torch.minimum(p, q).sum(-1)
        print(f"ctx {context} budget {budget} T {temperature} {name:14s}: greedy agreement {agree.mean():.3f} (halves {agree[:n//2].mean():.3f} {agree[n//2:].mean():.3f}) expected acceptance {acc.mean():.3f} (halves {acc[:n//2].mean():.3f} {acc[n//2:].mean():.3f})", flush=True)
    CR.chunk_scores = mean_scores
