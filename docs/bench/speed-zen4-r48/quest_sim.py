"""Per-step, query-aware selection (as Quest, Tang et al. 2024) for the middle level at 32K, teacher-forced:
at each continuation position the retrieval cache is selected from everything before it with that
position's own query (the target's, recorded over the continuation: what a per-layer selection inside the
pass would see), by the chunks' mean keys (chunk 8 or 32) or by the attention mass (an upper bound), against
the static selection made once with the prompt's last query. python quest_sim.py S NEW OFFSETS BUDGETS"""
import argparse, dataclasses, os, sys
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
spec = importlib.util.spec_from_file_location("selection", os.path.join(os.path.dirname(os.path.abspath(__file__)), "selection.py"))
sel = importlib.util.module_from_spec(spec); spec.loader.exec_module(sel)

def bound_scores(keys, query, chunk):
    """Quest's bound: per chunk and KV head, the sum over its G query heads of sum_d max(q_d min_d, q_d max_d)
    (min and max of the chunk's keys per dimension), an upper bound on each head's largest dot product there."""
    B, Hkv, S, D = keys.shape
    kc = keys.float().view(B, Hkv, S // chunk, chunk, D)
    lo, hi = kc.amin(3), kc.amax(3)                                    # [B, Hkv, C, D]
    q = query.float().view(B, Hkv, -1, D)[:, :, :, None, :]            # [B, Hkv, G, 1, D]
    return torch.maximum(q * lo[:, :, None], q * hi[:, :, None]).sum(-1).sum(2)   # [B, Hkv, C]


VARIANTS = [(v.split(":")[0], int(v.split(":")[1])) for v in os.environ.get(
    "VARIANTS", "static:8;per step, mean keys:8;per step, mean keys:32;per step, mass:8").split(";")]
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
L = engine.cfg.num_layers
with torch.inference_mode():
    for off in offsets:
        ids = engine.tokenizer.encode(text[off:off + 8 * S])[:S]
        request = dataclasses.replace(run, temperature=0.0, max_new_tokens=NEW)
        target, seq, tl = teacher_forced(engine, request, ids)
        n = len(seq) - len(ids); targ = tl.argmax(-1); ctx = len(ids) - 1
        cache = target.cache
        prompt_query = cache.last_query.clone()
        cls = cache.__class__; cache.__class__ = sel.Recording; cache.seen = {}
        target.feed(seq[:-1], keep_last=1)          # the cache now holds prompt + continuation; queries recorded
        cache.__class__ = cls
        queries = {l: torch.cat(v, 2) for l, v in cache.seen.items()}   # [B, H, n, D]; index i <-> input ctx + i
        for budget in budgets:
            for name, chunk in VARIANTS:
                hits = []
                for i in range(n):
                    m = ctx + i if name != "static" else ctx
                    whole = m // chunk * chunk
                    if name == "static":
                        sc = [chunk_scores(cache.k[l, :, :, :whole], prompt_query[l], chunk) for l in range(L)]
                    elif name.endswith("bounds"):
                        sc = [bound_scores(cache.k[l, :, :, :whole], queries[l][:, :, i], chunk) for l in range(L)]
                    elif name.endswith("mean keys"):
                        sc = [chunk_scores(cache.k[l, :, :, :whole], queries[l][:, :, i], chunk) for l in range(L)]
                    else:
                        sc = sel.mass_scores(cache, queries, m, chunk, [i])
                    c = sel.Chosen(model.cfg, cache.rope, 1, budget, chunk, n + 16, engine.device, model.dtype, recent=256)
                    c.scores = sc
                    keep = cache.length; c.fill_from(cache, m); cache.length = keep
                    mid = Level("retrieval", model, c, request.sampling, 512)
                    mid.cached = list(seq[:m]); mid.commit(mid.cached)
                    if name == "static":    # one selection, the whole continuation in one pass
                        lg = mid.feed(seq[:-1], keep_last=n); hits = (lg.argmax(-1) == targ).float().tolist(); break
                    lg = mid.feed(seq[:ctx + i + 1], keep_last=1)
                    hits.append(float(lg[-1].argmax(-1) == targ[i]))
                h = torch.tensor(hits)
                print(f"offset {off} budget {budget} chunk {chunk:2d} {name:20s}: agreement {h.mean().item():.3f}  "
                      f"[0-32 {h[:32].mean().item():.3f}, 32-128 {h[32:].mean().item():.3f}]", flush=True)
