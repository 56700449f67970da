"""python churn.py S NEW OFFSETS T (stepsel's first form, cache_selective.py). How much of a layer's per-pass chunk selection changes from one pass to the next (selective cache, T-token passes)."""
import os, sys
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "speed-zen4-r48")]
from forcing import forced, from_argv, prompts
import torch
import cache_selective   # this directory's: the first form, module path only
from cache_selective import SelectiveCache
from triforce.runtime.cache_retrieval import select_positions
T = int(sys.argv[4])
S, NEW, engine, run, models = from_argv()
model = models["int4"]
seen = {}
orig = cache_selective.pass_scores
def record(means, q):
    sc = orig(means, q)
    seen.setdefault(record.layer, []).append(sc)
    record.layer += 1
    return sc
cache_selective.pass_scores = record
with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        full = target.cache
        cache = SelectiveCache(2192, 64, recent=256); cache.fill_from(full, ctx)
        cache.chosen_slots = lambda: None
        n_pick, end, tail = cache.selection()
        seen.clear()
        for i in range(0, n, T):
            cache.crop(ctx + i); record.layer = 0
            model.forward(torch.tensor([seq[ctx + i:ctx + min(i + T, n)]]), cache)
        changed = []
        for layer, scs in seen.items():
            sets = [set(sc[0, h, 1:end].topk(n_pick).indices.tolist()) for sc in scs for h in range(sc.shape[1])]
            Hkv = scs[0].shape[1]
            for p in range(1, len(scs)):
                for h in range(Hkv):
                    a, b = sets[(p - 1) * Hkv + h], sets[p * Hkv + h]
                    changed.append(len(b - a) / n_pick)
        c = torch.tensor(changed)
        print(f"S {S} T {T} offset {off}: n_pick {n_pick}; per pass, the share of chosen chunks new since the last pass: mean {c.mean():.3f}, median {c.median():.3f}, p90 {c.quantile(0.9):.3f}", flush=True)
