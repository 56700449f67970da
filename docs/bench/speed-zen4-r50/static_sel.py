"""Static retrieval selection scored better? Teacher-forced greedy agreement (as round 48's midacc.py) of an int4
middle level on retrieval caches chosen once, from the prompt alone, by:
  mean           the runtime's score: the prompt's last query against each chunk's mean key, summed over G
  mass W max     the softmax mass (over the whole prompt) the prompt's last W queries put on each chunk, most of any
  mass W mean    ... their mean
and, for reference, the oracle (the mass the continuation's own queries put there, most of any).
python static_sel.py S NEW OFFSETS BUDGET WS   (WS: comma-separated W, e.g. 1,16,64)"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r48"))
from forcing import from_argv, Chosen, Recording, by_stretch, forced, level_on, mass_scores, prompts, record_queries
import torch

S, NEW, engine, run, models = from_argv()
model = models["int4"]
budget, WS = int(sys.argv[4]), [int(w) for w in sys.argv[5].split(",")]


def prompt_queries(target, seq, ctx, W):
    """The queries of the prompt's last W positions (ctx - W + 1 .. ctx), per layer [B, H, W, D]; the cache is
    left holding seq[:ctx + 1]."""
    cache = target.cache
    last = cache.last_query.clone()
    cache.crop(ctx - W + 1)
    target.cached, target.safe = list(seq[:ctx - W + 1]), 0
    kind, cache.__class__, cache.seen = cache.__class__, Recording, {}
    try:
        target.feed(seq[:ctx + 1], keep_last=1)
    finally:
        cache.__class__ = kind
    cache.last_query.copy_(last)
    return {layer: torch.cat(qs, 2) for layer, qs in cache.seen.items()}


def mass_mean(full, queries, n, chunk):
    out = []
    whole = n // chunk * chunk
    for layer in range(full.k.shape[0]):
        q = queries[layer]
        keys = full.k[layer, :, :, :n].float()
        B, H, Q, D = q.shape
        Hkv = keys.shape[1]
        s = (q.reshape(B, Hkv, H // Hkv * Q, D).float() * D ** -0.5) @ keys.transpose(-1, -2)
        p = torch.softmax(s, -1)[..., :whole].reshape(B, Hkv, -1, whole // 8, 8).sum(-1)
        out.append(p.mean(2))
    return out


with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        cache = target.cache
        queries, _ = record_queries(target, seq)           # the continuation's (the oracle); cache: prompt + continuation
        cache.crop(ctx + 1); target.cached = list(seq[:ctx + 1]); target.safe = 0
        choices = {"mean (runtime)": None, "oracle, all future": mass_scores(cache, queries, ctx, 8, list(range(n)))}
        for W in WS:
            pq = prompt_queries(target, seq, ctx, W)
            choices[f"mass {W} max"] = mass_scores(cache, pq, ctx, 8, list(range(W)))
            if W > 1:
                choices[f"mass {W} mean"] = mass_mean(cache, pq, ctx, 8)
        for name, sc in choices.items():
            c = Chosen(model.cfg, cache.rope, 1, budget, 8, n + 16, engine.device, model.dtype, recent=256)
            c.scores = sc
            c.fill_from(cache, ctx)
            hits = (level_on(model, c, request, seq, ctx).feed(seq[:-1], keep_last=n).argmax(-1) == logits.argmax(-1)).float()
            print(f"offset {off} budget {budget} {name:22s}: agreement {hits.mean().item():.3f}  [{by_stretch(hits)}]", flush=True)
