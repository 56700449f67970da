"""Extension's bar for a greedy proposer (gamma.EXTEND_CONFIDENCE["greedy"]: drafts go on past γ2 while the middle
level's top probability is at least this) at other values, against the runtime's 0.9, and `ar`, interleaved in one
process on one kept prefill: python bar_ab.py S NEW ROUNDS BAR... Prints each request's ms/token and the target's
passes and extension tokens (offered / accepted), then medians."""
import dataclasses, os, statistics, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from triforce.runtime import gamma

S, NEW, R = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
bars = [float(b) for b in sys.argv[4:]]
args, eng, run, ids = triforce_request(S, 0.0, NEW)
variants = {"ar": (dict(mode="ar"), 0.9), **{f"bar {b}": ({}, b) for b in bars}}
res = {v: [] for v in variants}
for v, (kw, bar) in variants.items():   # warm-up
    gamma.EXTEND_CONFIDENCE["greedy"] = bar
    eng.generate(ids, dataclasses.replace(run, **kw))
for r in range(R):
    for v, (kw, bar) in variants.items():
        gamma.EXTEND_CONFIDENCE["greedy"] = bar
        result = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
        st = result.stats
        res[v].append(st["ms_per_token"])
        tgt = st["levels"]["target"]
        print(f"  {r} {v:8s} {st['ms_per_token']:.2f} ms/token | target passes {tgt['passes']} {tgt['seconds']:.3f} s, "
              f"extended {tgt.get('extended')}/{tgt.get('extended_accepted')}, middle "
              f"{st['levels'].get('retrieval', {}).get('seconds', 0):.3f} s | tokens {hash(tuple(result.token_ids)) % 10000}", flush=True)
gamma.EXTEND_CONFIDENCE["greedy"] = 0.9
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:8s} median {m:.2f} ms/token ({ar / m:.3f}x ar)")
