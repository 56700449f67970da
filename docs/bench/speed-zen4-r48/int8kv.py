"""The middle level's retrieval KV in int8 (simulated: each selected row of K and V rounded to int8 with its own
scale, max|x| / 127, then back), teacher-forced, greedy agreement and expected acceptance at T = 0.6.
python int8kv.py S NEW OFFSETS BUDGETS  (each budget in bf16 and in int8)"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import from_argv, kept, level_on, sampled
import torch
from triforce.runtime.cache_retrieval import RetrievalCache


class Int8Rows(RetrievalCache):
    def fill_from(self, full, n):
        super().fill_from(full, n)
        for t in (self.k, self.v):
            rows = t[:, :, :, :self.selected].float()                       # [L, B, Hkv, kept, D]
            scale = rows.abs().amax(-1, keepdim=True).clamp(min=1e-8) / 127
            t[:, :, :, :self.selected] = ((rows / scale).round().clamp(-127, 127) * scale).to(t.dtype)


S, NEW, engine, run, models = from_argv()
model = models["int4"]
budgets = [int(b) for b in sys.argv[4].split(",")]
with torch.inference_mode():
    for off, T, params, (request, target, seq, logits, n, ctx) in sampled(engine, run, S, NEW, sys.argv[3]):
        for budget in budgets:
            for kind, cls in (("bf16", RetrievalCache), ("int8", Int8Rows)):
                c = cls(model.cfg, target.cache.rope, 1, budget, 8, n + 16, engine.device, model.dtype, recent=min(256, budget // 4))
                c.fill_from(target.cache, ctx)
                lg = level_on(model, c, request, seq, ctx).feed(seq[:-1], keep_last=n)
                agree, overlap = kept(lg, logits, params)
                print(f"offset {off} T {T} budget {budget} {kind}: greedy agreement {agree:.3f}, expected acceptance {overlap:.3f}", flush=True)
