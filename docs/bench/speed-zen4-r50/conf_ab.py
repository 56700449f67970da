"""A greedy level's confidence in its drafts (speculate.top_probabilities) by the one-read native kernel (this
round: sampling.top_probability) against the softmax written out and its maximum read back (before), and `ar`,
interleaved in one process on one kept prefill: python conf_ab.py S T NEW ROUNDS. Prints each request's ms/token,
its time outside the passes and in Level.confidences, then medians."""
import os, sys, dataclasses, statistics, time, functools
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import speculate
from triforce.runtime.sampling import SamplingParams, probs_from_logits

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
new_top = speculate.top_probability
SOFTMAX = SamplingParams(temperature=1.0, top_p=1.0)
old_top = lambda logits: probs_from_logits(logits, SOFTMAX).amax(-1)   # the code before
spent = [0.0]
conf = speculate.Level.confidences


@functools.wraps(conf)
def timed_conf(self, n):
    t = time.perf_counter()
    try:
        return conf(self, n)
    finally:
        spent[0] += time.perf_counter() - t


speculate.Level.confidences = timed_conf
variants = {"ar": (dict(mode="ar"), new_top), "softmax": (dict(), old_top), "native": (dict(), new_top)}
res, out, cf = ({v: [] for v in variants} for _ in range(3))
for v, (kw, top) in variants.items():
    speculate.top_probability = top
    eng.generate(ids, dataclasses.replace(run, **kw))   # warm-up
for r in range(R):
    for v, (kw, top) in variants.items():
        speculate.top_probability = top
        spent[0] = 0.0
        result = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
        st = result.stats
        res[v].append(st["ms_per_token"])
        out[v].append(1000 * (st["decode_s"] - sum(x["seconds"] for x in st["levels"].values())) / st["new_tokens"])
        cf[v].append(1000 * spent[0])
        print(f"  {r} {v:7s} {st['ms_per_token']:.2f} ms/token, outside the passes {out[v][-1]:.3f} ms/token, "
              f"confidences {cf[v][-1]:.1f} ms, tokens {hash(tuple(result.token_ids)) % 10000}", flush=True)
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:7s} median {m:.2f} ms/token ({ar / m:.2f}x ar), outside the passes {statistics.median(out[v]):.3f} "
          f"ms/token, confidences {statistics.median(cf[v]):.1f} ms a request")
