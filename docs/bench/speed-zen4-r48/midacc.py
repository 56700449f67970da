"""Teacher-forced greedy agreement of the middle level at S tokens, by continuation position, for
retrieval-cache variants (budget, recent, chunk) and weights. python midacc.py S NEW OFFSETS VARIANTS...
VARIANT = weights,budget,recent,chunk (e.g. int4,2192,256,8; budget 0 = all)."""
import dataclasses, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import by_stretch, forced, from_argv, prompts
import torch
from triforce.runtime.bench.lower import middle_level

variants = [v.split(",") for v in sys.argv[4:]]
S, NEW, engine, run, models = from_argv({v[0] for v in variants})
with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        for w, budget, recent, chunk in variants:
            r = dataclasses.replace(request, retrieval_budget=int(budget) or S + 16, retrieval_recent=int(recent), chunk_size=int(chunk))
            t0 = time.time()
            mid = middle_level(engine, r, models[w], target, ctx, len(seq) + 8)
            hits = (mid.feed(seq[:-1], keep_last=n).argmax(-1) == logits.argmax(-1)).float()
            print(f"offset {off} {w:5s} budget {budget:>5s} recent {recent:>4s} chunk {chunk:>2s}: agreement "
                  f"{hits.mean().item():.3f}  [{by_stretch(hits)}]  ({time.time() - t0:.1f} s)", flush=True)
