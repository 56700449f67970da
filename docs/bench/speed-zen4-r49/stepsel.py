"""Teacher-forced greedy agreement of the middle level at S tokens: the static retrieval cache against the
selective cache (cache_selective.py: each layer of each pass picks chunks of the target's full cache with
that pass's queries), in passes of T tokens whose earlier positions hold the target's K/V (as after a
verify) and whose own positions the middle level writes.
python stepsel.py S NEW OFFSETS VARIANTS...; VARIANT = static,BUDGET,CHUNK,T or SCORE,BUDGET,CHUNK,T with SCORE one of SCORES (how a chunk's mean key is scored).
Module path only (the scores other than `step` have no native twin)."""
import dataclasses, os, sys, time
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "speed-zen4-r48")]
from forcing import by_stretch, forced, from_argv, prompts
import torch
from triforce.runtime.bench.lower import middle_level
import cache_selective   # this directory's: the first form, module path only
from cache_selective import SelectiveCache


def grouped_dots(means, q):
    B, Hkv, C, D = means.shape
    g = q.float().view(B, Hkv, -1, q.shape[2], D)                                   # [B, Hkv, G, T, D]
    return torch.einsum("bhgtd,bhcd->bhgtc", g, means.float())                      # [B, Hkv, G, T, C]


SCORES = {
    "step": cache_selective.pass_scores,                                            # max over T of the G heads' sum
    "maxg": lambda m, q: grouped_dots(m, q).flatten(2, 3).amax(2),                  # max over T and G
    "soft": lambda m, q: torch.softmax(grouped_dots(m, q) * m.shape[-1] ** -0.5, -1).flatten(2, 3).amax(2),   # max chunk-level probability
    "softsum": lambda m, q: torch.softmax(grouped_dots(m, q) * m.shape[-1] ** -0.5, -1).flatten(2, 3).sum(2),
}

variants = [v.split(",") for v in sys.argv[4:]]
S, NEW, engine, run, models = from_argv()
model = models["int4"]
with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        targ = logits.argmax(-1)
        full = target.cache
        kc, vc = full.k[:, :, :, ctx:ctx + n].clone(), full.v[:, :, :, ctx:ctx + n].clone()   # the target's own
        for kind, budget, chunk, T in variants:
            budget, chunk, T = int(budget), int(chunk), int(T)
            t0 = time.time()
            if kind == "static":
                r = dataclasses.replace(request, retrieval_budget=budget, retrieval_recent=256, chunk_size=chunk)
                cache = middle_level(engine, r, model, target, ctx, len(seq) + 8).cache
            else:
                cache_selective.pass_scores = SCORES[kind]
                cache = SelectiveCache(budget, chunk, recent=256)
                cache.fill_from(full, ctx)
                cache.chosen_slots = lambda: None   # the module path, where pass_scores is the variant's
            hits = []
            for i in range(0, n, T):
                cache.crop(ctx + i)
                tokens = torch.tensor([seq[ctx + i:ctx + min(i + T, n)]])
                out = model.forward(tokens, cache)[0]                               # [T', V]
                hits += (out.argmax(-1) == targ[i:i + tokens.shape[1]]).float().tolist()
                full.k[:, :, :, ctx + i:ctx + i + T], full.v[:, :, :, ctx + i:ctx + i + T] = kc[:, :, :, i:i + T], vc[:, :, :, i:i + T]
            h = torch.tensor(hits)
            print(f"offset {off} {kind:6s} budget {budget} chunk {chunk:2d} T {T}: agreement {h.mean().item():.3f}  "
                  f"[{by_stretch(h)}]  ({time.time() - t0:.1f} s)", flush=True)
