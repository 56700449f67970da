"""Would re-selecting the retrieval cache during decode raise the middle level's agreement at 32K?
Teacher-forced (as midacc.py): for each segment [s, s + SEG) of the target's greedy continuation, the
retrieval cache is selected from the target's cache over everything before it (prompt + continuation
so far), scored with the query of the last token before the segment (what a rebuild every SEG tokens
would see; s = 0: the prompt's last query, the static selection), or by the attention mass of the
previous SEG tokens' queries. python rebuild_sim.py S NEW OFFSETS BUDGET SEG"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import from_argv, Chosen, level_on, mass_scores, recorded
import torch
from triforce.runtime.cache_retrieval import chunk_scores

S, NEW, engine, run, models = from_argv()
model = models["int4"]
budget, SEG = int(sys.argv[4]), int(sys.argv[5])
L = engine.cfg.num_layers
with torch.inference_mode():
    for off, request, target, seq, targ, n, ctx, queries, prompt_query in recorded(engine, run, S, NEW, sys.argv[3]):
        cache = target.cache   # holds prompt + continuation
        res = {k: [] for k in ("static", "rebuild, last query", "rebuild, mass of last SEG")}
        for s in range(0, n, SEG):
            m = ctx + s
            for name in res:
                if name == "static" or s == 0:
                    src, sc = ctx, [chunk_scores(cache.k[l, :, :, :ctx // 8 * 8], prompt_query[l], 8) for l in range(L)]
                elif name == "rebuild, last query":
                    src, sc = m, [chunk_scores(cache.k[l, :, :, :m // 8 * 8], queries[l][:, :, s - 1], 8) for l in range(L)]
                else:
                    src, sc = m, mass_scores(cache, queries, m, 8, list(range(max(0, s - SEG), s)))
                c = Chosen(model.cfg, cache.rope, 1, budget, 8, n + 16, engine.device, model.dtype, recent=256)
                c.scores = sc
                c.fill_from(cache, src)
                rows = min(SEG, n - s)
                lg = level_on(model, c, request, seq, src).feed(seq[:m + rows], keep_last=rows)
                res[name].append((lg.argmax(-1) == targ[s:s + SEG]).float())
        for name, parts in res.items():
            print(f"offset {off} budget {budget} seg {SEG} {name:28s}: agreement {torch.cat(parts).mean().item():.3f}  "
                  "per segment " + " ".join(f"{x.mean().item():.2f}" for x in parts), flush=True)
