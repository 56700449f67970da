"""The middle level with some of its decoder layers skipped (self-speculation, as LayerSkip / SWIFT): teacher-
forced greedy agreement (as midacc.py) and expected acceptance at T = 0.6 of the int4 middle level on its retrieval
cache, whole or without the layers named. python skip.py S NEW OFFSETS SKIPS...  (SKIP: layer indices joined by
'+', or 'none')"""
import argparse, copy, dataclasses, sys, time
import triforce.runtime
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, corpus_text
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.cache_retrieval import RetrievalCache
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
from triforce.runtime.speculate import Level

class Mapped(RetrievalCache):
    """A retrieval cache of the kept layers only: layer i of it is layer keep[i] of the full cache."""
    keep = None
    def fill_from(self, full, n):
        class View:   # the full cache as seen through the map
            last_query = full.last_query[self.keep]
            def layer_kv(_, layer):
                return full.layer_kv(self.keep[layer])
        super().fill_from(View(), n)

S, NEW = int(sys.argv[1]), int(sys.argv[2])
offsets = [int(o) for o in sys.argv[3].split(",")]
skips = sys.argv[4:]
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                     "--corpus", "essays", "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
base = lower_level_copy(engine.model, "int4")
L = engine.cfg.num_layers
models = {}
for sk in skips:
    drop = set() if sk == "none" else {int(x) for x in sk.split("+")}
    keep = [i for i in range(L) if i not in drop]
    m = copy.copy(base); m._modules = dict(base._modules)          # (a shallow copy shares the module dicts)
    m.cfg = dataclasses.replace(base.cfg, num_layers=len(keep))
    m.model = copy.copy(base.model); m.model._modules = dict(base.model._modules)
    m.model.layers = torch.nn.ModuleList([base.model.layers[i] for i in keep])
    models[sk] = (m, keep)
text = corpus_text("essays")
with torch.inference_mode():
    for off in offsets:
        ids = engine.tokenizer.encode(text[off:off + 8 * S])[:S]
        for T in (0.0, 0.6):
            params = SamplingParams(temperature=T, top_p=0.9)
            request = dataclasses.replace(run, temperature=T, max_new_tokens=NEW, seed=1)
            target, seq, tl = teacher_forced(engine, request, ids)
            n = len(seq) - len(ids); ptarget = probs_from_logits(tl, params)
            for sk, (m, keep) in models.items():
                budget = run.budget_for(len(ids))
                c = Mapped(m.cfg, target.cache.rope, 1, budget, 8, n + 16, engine.device, m.dtype, recent=min(256, budget // 4))
                c.keep = keep
                c.fill_from(target.cache, len(ids) - 1)
                mid = Level("retrieval", m, c, request.sampling, 512)
                mid.cached = list(target.cached[:len(ids) - 1]); mid.commit(mid.cached)
                lg = mid.feed(seq[:-1], keep_last=n)
                t = time.perf_counter()
                for _ in range(5):
                    mid.feed(seq[:-1] + [seq[-1]], keep_last=1); mid.cache.crop(len(seq) - 1); mid.cached = list(seq[:-1])
                ms = (time.perf_counter() - t) / 5 * 1e3
                agree = (lg.argmax(-1) == tl.argmax(-1)).float().mean().item()
                overlap = torch.minimum(ptarget, probs_from_logits(lg, params)).sum(-1).mean().item()
                print(f"offset {off} T {T} skip {sk:14s} ({len(keep)} layers): greedy agreement {agree:.3f}, "
                      f"expected acceptance {overlap:.3f}, 1-token pass {ms:.2f} ms", flush=True)
