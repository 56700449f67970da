"""Which chunks would the middle level at 32K need? Teacher-forced greedy agreement (as midacc.py) of
retrieval caches whose chunks are chosen by: the prompt's last query (as now), or the attention mass
the target's queries at the continuation's positions put on each chunk (an oracle: those queries come
from the future). python oracle.py S NEW OFFSETS BUDGETS  (e.g. 2192,4096)"""
import argparse, dataclasses, importlib.util, os, sys
import triforce.runtime
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, corpus_text
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.speculate import Level
spec = importlib.util.spec_from_file_location("selection", os.path.join(os.path.dirname(os.path.abspath(__file__)), "selection.py"))
sel = importlib.util.module_from_spec(spec); spec.loader.exec_module(sel)
Recording, Chosen, mass_scores = sel.Recording, sel.Chosen, sel.mass_scores

S, NEW = int(sys.argv[1]), int(sys.argv[2])
offsets = [int(o) for o in sys.argv[3].split(",")]
budgets = [int(b) for b in sys.argv[4].split(",")]
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                     "--corpus", "essays", "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
model = lower_level_copy(engine.model, "int4")
text = corpus_text("essays")
edges = [0, 16, 32, 64, 128, 256, 512]
with torch.inference_mode():
    for off in offsets:
        ids = engine.tokenizer.encode(text[off:off + 8 * S])[:S]
        request = dataclasses.replace(run, temperature=0.0, max_new_tokens=NEW)
        target, seq, tl = teacher_forced(engine, request, ids)
        n = len(seq) - len(ids); targ = tl.argmax(-1); ctx = len(ids) - 1
        cache = target.cache; cls = cache.__class__
        prompt_query = cache.last_query.clone()   # (oracle32.log ran without restoring it: its "last query" rows
                                                  # scored with the continuation's last query; midacc32.log has the static rows)
        cache.__class__ = Recording; cache.seen = {}
        target.feed(seq[:-1], keep_last=1)                  # the continuation's queries, recorded
        queries = {l: torch.cat(v, 2) for l, v in cache.seen.items()}   # [B, H, n + 1?, D]
        cache.__class__ = cls
        target.feed(ids[:-1])                                # back to the prompt
        cache.last_query.copy_(prompt_query)
        Q = queries[0].shape[2]
        print(f"offset {off}: {Q} recorded queries per layer (continuation {n})", flush=True)
        selections = {"last query": None,
                      "oracle, all future": list(range(Q - n, Q)),
                      "oracle, first 16": list(range(Q - n, Q - n + 16)),
                      "oracle, each pos's 8 previous + last": None}
        for budget in budgets:
            for name, which in selections.items():
                if name.startswith("oracle, each"):
                    continue
                sc = None if which is None else mass_scores(cache, queries, ctx, 8, which)
                r = dataclasses.replace(request, retrieval_budget=budget)
                c = Chosen(model.cfg, cache.rope, 1, budget, 8, n + 16, engine.device, model.dtype, recent=256)
                c.scores = sc
                c.fill_from(cache, ctx)
                mid = Level("retrieval", model, c, request.sampling, 512)
                mid.cached = list(target.cached[:ctx]); mid.commit(mid.cached)
                lg = mid.feed(seq[:-1], keep_last=n)
                a = (lg.argmax(-1) == targ).float()
                parts = " ".join(f"{lo}-{hi}:{a[lo:hi].mean().item():.3f}" for lo, hi in zip(edges, edges[1:]) if lo < n)
                print(f"offset {off} budget {budget} {name:22s}: agreement {a.mean().item():.3f}  [{parts}]", flush=True)
