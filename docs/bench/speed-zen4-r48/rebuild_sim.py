"""Would re-selecting the retrieval cache during decode raise the middle level's agreement at 32K?
Teacher-forced (as midacc.py): for each segment [s, s + SEG) of the target's greedy continuation, the
retrieval cache is selected from the target's cache over everything before it (prompt + continuation
so far), scored with the query of the last token before the segment (what a rebuild every SEG tokens
would see; s = 0: the prompt's last query, the static selection), or by the attention mass of the
previous SEG tokens' queries. python rebuild_sim.py S NEW OFFSETS BUDGET SEG"""
import argparse, dataclasses, sys
import triforce.runtime
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, corpus_text
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.cache_retrieval import chunk_scores
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.speculate import Level
import importlib.util
import os
spec = importlib.util.spec_from_file_location("selection", os.path.join(os.path.dirname(os.path.abspath(__file__)), "selection.py"))
od = importlib.util.module_from_spec(spec); spec.loader.exec_module(od)

S, NEW = int(sys.argv[1]), int(sys.argv[2])
offsets = [int(o) for o in sys.argv[3].split(",")]
budget, SEG = int(sys.argv[4]), int(sys.argv[5])
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                     "--corpus", "essays", "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
model = lower_level_copy(engine.model, "int4")
text = corpus_text("essays")
with torch.inference_mode():
    for off in offsets:
        ids = engine.tokenizer.encode(text[off:off + 8 * S])[:S]
        request = dataclasses.replace(run, temperature=0.0, max_new_tokens=NEW)
        target, seq, tl = teacher_forced(engine, request, ids)
        n = len(seq) - len(ids); targ = tl.argmax(-1); ctx = len(ids) - 1
        cache = target.cache
        prompt_query = cache.last_query.clone()
        cls = cache.__class__; cache.__class__ = od.Recording; cache.seen = {}
        target.feed(seq[:-1], keep_last=1)          # the cache now holds prompt + continuation; queries recorded
        cache.__class__ = cls
        queries = {l: torch.cat(v, 2) for l, v in cache.seen.items()}   # [B, H, n, D]; index i <-> input ctx + i
        res = {k: [] for k in ("static", "rebuild, last query", "rebuild, mass of last SEG")}
        for s in range(0, n, SEG):
            m = ctx + s
            whole = m // 8 * 8
            for name in res:
                if name == "static" or s == 0:
                    sc = [chunk_scores(cache.k[l, :, :, :ctx // 8 * 8], prompt_query[l], 8) for l in range(30)]
                    src = ctx
                elif name == "rebuild, last query":
                    sc = [chunk_scores(cache.k[l, :, :, :whole], queries[l][:, :, s - 1], 8) for l in range(30)]
                    src = m
                else:
                    sc = od.mass_scores(cache, queries, m, 8, list(range(max(0, s - SEG), s)))
                    src = m
                c = od.Chosen(model.cfg, cache.rope, 1, budget, 8, n + 16, engine.device, model.dtype, recent=256)
                c.scores = sc
                saved_len = cache.length; c.fill_from(cache, src); cache.length = saved_len
                mid = Level("retrieval", model, c, request.sampling, 512)
                mid.cached = list(seq[:src]); mid.commit(mid.cached)
                lg = mid.feed(seq[:m + min(SEG, n - s)], keep_last=min(SEG, n - s))
                res[name].append((lg.argmax(-1) == targ[s:s + SEG]).float())
        for name, parts in res.items():
            a = torch.cat(parts)
            print(f"offset {off} budget {budget} seg {SEG} {name:28s}: agreement {a.mean().item():.3f}  per segment "
                  + " ".join(f"{x.mean().item():.2f}" for x in parts), flush=True)
