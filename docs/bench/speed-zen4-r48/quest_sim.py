"""Per-step, query-aware selection (as Quest, Tang et al. 2024) for the middle level at 32K, teacher-forced:
at each continuation position the retrieval cache is selected from everything before it with that
position's own query (the target's, recorded over the continuation: what a per-layer selection inside the
pass would see), by the chunks' mean keys, by Quest's min/max bounds, or by the attention mass (an upper
bound), against the static selection made once with the prompt's last query.
python quest_sim.py S NEW OFFSETS BUDGETS; VARIANTS='NAME:CHUNK;...' (environment) picks the variants:
static, per step, mean keys / min/max bounds / mass (default: quest.log's four)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import from_argv, Chosen, level_on, mass_scores, recorded
import torch
from triforce.runtime.cache_retrieval import chunk_scores


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
S, NEW, engine, run, models = from_argv()
model = models["int4"]
budgets = [int(b) for b in sys.argv[4].split(",")]
L = engine.cfg.num_layers
with torch.inference_mode():
    for off, request, target, seq, targ, n, ctx, queries, prompt_query in recorded(engine, run, S, NEW, sys.argv[3]):
        cache = target.cache   # holds prompt + continuation
        for budget in budgets:
            for name, chunk in VARIANTS:
                hits = []
                for i in range(n):
                    m = ctx if name == "static" else ctx + i
                    whole = m // chunk * chunk
                    if name == "static":
                        sc = [chunk_scores(cache.k[l, :, :, :whole], prompt_query[l], chunk) for l in range(L)]
                    elif name.endswith("bounds"):
                        sc = [bound_scores(cache.k[l, :, :, :whole], queries[l][:, :, i], chunk) for l in range(L)]
                    elif name.endswith("mean keys"):
                        sc = [chunk_scores(cache.k[l, :, :, :whole], queries[l][:, :, i], chunk) for l in range(L)]
                    else:
                        sc = mass_scores(cache, queries, m, chunk, [i])
                    c = Chosen(model.cfg, cache.rope, 1, budget, chunk, n + 16, engine.device, model.dtype, recent=256)
                    c.scores = sc
                    c.fill_from(cache, m)
                    mid = level_on(model, c, request, seq, m)
                    if name == "static":    # one selection, the whole continuation in one pass
                        hits = (mid.feed(seq[:-1], keep_last=n).argmax(-1) == targ).float().tolist()
                        break
                    hits.append(float(mid.feed(seq[:m + 1], keep_last=1)[-1].argmax(-1) == targ[i]))
                h = torch.tensor(hits)
                print(f"offset {off} budget {budget} chunk {chunk:2d} {name:20s}: agreement {h.mean().item():.3f}  "
                      f"[0-32 {h[:32].mean().item():.3f}, 32-128 {h[32:].mean().item():.3f}]", flush=True)
