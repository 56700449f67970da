"""Needs select_step.patch (this directory) applied: git apply docs/bench/speed-zen4-r49/select_step.patch.
`triforce` with the retrieval cache's chunks chosen once (static, chunks of 8) against chosen per pass
(step, chunks of 64), and `ar`, interleaved in one process on one kept prefill:
python select_ab.py S T NEW ROUNDS. Prints each round's ms/token and the target's acceptance, then medians."""
import os, sys, dataclasses, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
variants = {"ar": dict(mode="ar"), "static": dict(retrieval_select="static", chunk_size=8),
            "step": dict(retrieval_select="step", chunk_size=64)}
res, acc = {v: [] for v in variants}, {v: [] for v in variants}
for v, kw in variants.items():
    eng.generate(ids, dataclasses.replace(run, **kw))   # warm-up
for r in range(R):
    for v, kw in variants.items():
        st = eng.generate(ids, dataclasses.replace(run, seed=r, **kw)).stats
        res[v].append(st["ms_per_token"])
        t = st["levels"].get("target", {})
        mid = st["levels"].get("retrieval", {})
        acc[v].append((round(t.get("accepted", 0) / max(1, t.get("drafted", 0)), 3), round(mid.get("accepted", 0) / max(1, mid.get("drafted", 0)), 3)))
        lv = st["levels"]
        print(f"  {v:6s} {st['ms_per_token']:.2f} ms/token; per level (passes, tokens fed, s, drafted, accepted): "
              + "; ".join(f"{n} {x['passes']} {x['fed_tokens']} {x['seconds']:.2f} {x['drafted']} {x['accepted']}" for n, x in lv.items()), flush=True)
    print(r, {v: (round(res[v][-1], 2), acc[v][-1]) for v in variants}, flush=True)
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:6s} median {m:.2f} ms/token ({ar / m:.2f}x ar); (target, middle) acceptance {acc[v]}")
