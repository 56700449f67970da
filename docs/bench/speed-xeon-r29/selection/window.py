"""Teacher-forced middle-level agreement with the retrieval selection scored by the last W queries
(SnapKV-like attention mass, optionally max-pooled over neighbouring chunks) against the default
(one query, chunk-mean keys). python window.py CONTEXT NEW BUDGET ROPE T W..."""
import argparse, math, sys
import torch
import triforce.runtime.cache_retrieval as cr
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
context, new, budget, rope, T = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5])
windows = [int(w) for w in sys.argv[6:]]
torch.set_num_threads(2)
run = RunConfig(mode="ar", dtype="bf16", max_new_tokens=new, rope_scaling=None if rope == "none" else rope,
                retrieval_budget=budget, temperature=T)
engine = Engine(run, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
model = lower_level_copy(engine.model, "int4")
params = SamplingParams(temperature=T, top_p=0.9)
default_scores = cr.chunk_scores
with torch.inference_mode():
    target, seq, tl = teacher_forced(engine, run, ids)
    p = probs_from_logits(tl, params)
    base = len(ids) - 1
    saved = target.cache.last_query.clone()
    W = max(windows)
    qs = []
    for j in range(W):   # the last W tokens of the context fed one at a time: each one's query per layer
        target.feed(ids[:base - W + j + 1])
        qs.append(target.cache.last_query.clone())       # [L, B, H, D]
    Q = torch.stack(qs, dim=2)                            # [L, B, W, H, D]
    target.cache.last_query.copy_(saved)
    def report(name, ml):
        q = probs_from_logits(ml, params)
        acc = torch.minimum(p, q).sum(-1)
        agree = (tl.argmax(-1) == ml.argmax(-1)).float()
        parts = " ".join(f"{agree[i:i+32].mean():.2f}" for i in range(0, len(agree), 32))
        print(f"{name}: agreement {agree.mean():.3f} expected {acc.mean():.3f} | by 32: {parts}", flush=True)
    report("default", middle_logits(engine, run, model, target, ids, seq)[0])
    for w in windows:
        for pool in (1, 3):
            layer = [0]
            def scores(keys, query, chunk, w=w, pool=pool):
                B, Hkv, S, D = keys.shape
                q = Q[layer[0], :, W - w:].float()                          # [B, w, H, D]
                layer[0] += 1
                q = q.view(B, w, Hkv, -1, D).permute(0, 2, 1, 3, 4).reshape(B, Hkv, -1, D)   # [B, Hkv, w*G, D]
                s = torch.einsum("bhqd,bhsd->bhqs", q, keys.float()) / math.sqrt(D)
                m = torch.softmax(s, dim=-1).view(B, Hkv, q.shape[2], S // chunk, chunk).sum(dim=(2, 4))
                if pool > 1:
                    m = torch.nn.functional.max_pool1d(m, pool, stride=1, padding=pool // 2)
                return m
            cr.chunk_scores = scores
            report(f"W={w} pool={pool}", middle_logits(engine, run, model, target, ids, seq)[0])
            cr.chunk_scores = default_scores
