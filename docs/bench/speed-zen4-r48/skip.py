"""The middle level with some of its decoder layers skipped (self-speculation, as LayerSkip / SWIFT): teacher-
forced greedy agreement and expected acceptance at T = 0.6 of the int4 middle level on its retrieval cache,
whole or without the layers named, and its 1-token pass. python skip.py S NEW OFFSETS SKIPS...
(SKIP: layer indices joined by '+', or 'none')"""
import copy, dataclasses, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import from_argv, kept, level_on, sampled
import torch
from triforce.runtime.cache_retrieval import RetrievalCache


class Mapped(RetrievalCache):
    """A retrieval cache of the kept layers only: its layer i is layer keep[i] of the full cache."""
    keep = None

    def fill_from(self, full, n):
        keep = self.keep

        class View:   # the full cache as seen through the map
            last_query = full.last_query[keep]

            def layer_kv(self, layer):
                return full.layer_kv(keep[layer])
        super().fill_from(View(), n)


def without(base, drop: set):
    """base with the layers in `drop` left out (a shallow copy shares the module dicts: copied too)."""
    keep = [i for i in range(base.cfg.num_layers) if i not in drop]
    m = copy.copy(base); m._modules = dict(base._modules)
    m.cfg = dataclasses.replace(base.cfg, num_layers=len(keep))
    m.model = copy.copy(base.model); m.model._modules = dict(base.model._modules)
    m.model.layers = torch.nn.ModuleList([base.model.layers[i] for i in keep])
    return m, keep


S, NEW, engine, run, models = from_argv()
base = models["int4"]
models = {sk: without(base, set() if sk == "none" else {int(x) for x in sk.split("+")}) for sk in sys.argv[4:]}
with torch.inference_mode():
    for off, T, params, (request, target, seq, logits, n, ctx) in sampled(engine, run, S, NEW, sys.argv[3]):
        budget = run.budget_for(S)
        for sk, (m, keep) in models.items():
            c = Mapped(m.cfg, target.cache.rope, 1, budget, 8, n + 16, engine.device, m.dtype, recent=min(256, budget // 4))
            c.keep = keep
            c.fill_from(target.cache, ctx)
            mid = level_on(m, c, request, seq, ctx)
            lg = mid.feed(seq[:-1], keep_last=n)
            t = time.perf_counter()
            for _ in range(5):   # the last token again, rolled back: a 1-token pass
                mid.feed(seq, keep_last=1); mid.cache.crop(len(seq) - 1); mid.cached = list(seq[:-1])
            ms = (time.perf_counter() - t) / 5 * 1e3
            agree, overlap = kept(lg, logits, params)
            print(f"offset {off} T {T} skip {sk:14s} ({len(keep)} layers): greedy agreement {agree:.3f}, "
                  f"expected acceptance {overlap:.3f}, 1-token pass {ms:.2f} ms", flush=True)
