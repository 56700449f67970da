"""Which chunks would the middle level at 32K need? Teacher-forced greedy agreement (as midacc.py) of
retrieval caches whose chunks are chosen by: the prompt's last query (as now), or the attention mass
the target's queries at the continuation's positions put on each chunk (an oracle: those queries come
from the future). python oracle.py S NEW OFFSETS BUDGETS  (e.g. 2192,4096)
(oracle32.log ran before the prompt's last query was put back after recording: its "last query" rows scored with
the continuation's last query; midacc32.log has the static rows.)"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import from_argv, Chosen, by_stretch, forced, level_on, mass_scores, prompts, record_queries
import torch

S, NEW, engine, run, models = from_argv()
model = models["int4"]
budgets = [int(b) for b in sys.argv[4].split(",")]
with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        queries, _ = record_queries(target, seq)
        cache = target.cache
        selections = {"last query": None, "oracle, all future": list(range(n)), "oracle, first 16": list(range(16))}
        for budget in budgets:
            for name, which in selections.items():
                c = Chosen(model.cfg, cache.rope, 1, budget, 8, n + 16, engine.device, model.dtype, recent=256)
                c.scores = None if which is None else mass_scores(cache, queries, ctx, 8, which)
                c.fill_from(cache, ctx)
                hits = (level_on(model, c, request, seq, ctx).feed(seq[:-1], keep_last=n).argmax(-1) == logits.argmax(-1)).float()
                print(f"offset {off} budget {budget} {name:22s}: agreement {hits.mean().item():.3f}  [{by_stretch(hits)}]", flush=True)
