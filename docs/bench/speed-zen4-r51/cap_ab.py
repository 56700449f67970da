"""The largest γ2 `--gamma auto` considers (gamma.GAMMA_CAPS[-1], which also caps Extension's run of drafts past γ2)
at other values, against the runtime's 12, and `ar`, interleaved in one process on one kept prefill (greedy):
python cap_ab.py S NEW ROUNDS CAP... Prints each request's ms/token and the target's passes and extension tokens,
then medians."""
import dataclasses, os, statistics, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from triforce.runtime import gamma

S, NEW, R = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
caps = [int(c) for c in sys.argv[4:]]
args, eng, run, ids = triforce_request(S, 0.0, NEW)
first = gamma.GAMMA_CAPS[0]
variants = {"ar": (dict(mode="ar"), 12), **{f"cap {c}": ({}, c) for c in caps}}
res = {v: [] for v in variants}
for v, (kw, cap) in variants.items():   # warm-up (each cap probes its own largest pass once)
    gamma.GAMMA_CAPS = (first, cap)
    eng.generate(ids, dataclasses.replace(run, **kw))
for r in range(R):
    for v, (kw, cap) in variants.items():
        gamma.GAMMA_CAPS = (first, cap)
        result = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
        st = result.stats
        res[v].append(st["ms_per_token"])
        tgt = st["levels"]["target"]
        print(f"  {r} {v:7s} {st['ms_per_token']:.2f} ms/token | target passes {tgt['passes']} {tgt['seconds']:.3f} s, "
              f"extended {tgt.get('extended')}/{tgt.get('extended_accepted')}, middle "
              f"{st['levels'].get('retrieval', {}).get('seconds', 0):.3f} s | tokens {hash(tuple(result.token_ids)) % 10000}", flush=True)
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:7s} median {m:.2f} ms/token ({ar / m:.3f}x ar)")
