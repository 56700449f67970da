"""`triforce` with the round's sequences as speculate.Seq views (this round) against plain lists copied
each time (before: the decoder's step hands its committed list itself to the round, so every `seq + drafts`
and Level.feed copies it), and `ar`, interleaved in one process on one kept prefill:
python seq_ab.py S T NEW ROUNDS. Prints each request's ms/token and its time outside the passes, then medians."""
import os, sys, dataclasses, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import speculate

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
new_step = speculate.SpecDecoder.step


def list_step(self, budget):   # the step before this round: lists all the way down
    Seq = speculate.Seq

    class Lists(Seq):   # Seq(committed) hands the list itself on, as the step did
        def __new__(cls, base, *a):
            return base if not a else Seq(base, *a)
    speculate.Seq = Lists
    try:
        return new_step(self, budget)
    finally:
        speculate.Seq = Seq


variants = {"ar": (dict(mode="ar"), new_step), "lists": (dict(), list_step), "seq": (dict(), new_step)}
res, out = {v: [] for v in variants}, {v: [] for v in variants}
for v, (kw, step) in variants.items():
    speculate.SpecDecoder.step = step
    eng.generate(ids, dataclasses.replace(run, **kw))   # warm-up
for r in range(R):
    for v, (kw, step) in variants.items():
        speculate.SpecDecoder.step = step
        res_ = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
        st = res_.stats
        res[v].append(st["ms_per_token"])
        outside = st["decode_s"] - sum(x["seconds"] for x in st["levels"].values())
        out[v].append(1000 * outside / st["new_tokens"])
        print(f"  {r} {v:5s} {st['ms_per_token']:.2f} ms/token, outside the passes {out[v][-1]:.3f} ms/token, "
              f"tokens {hash(tuple(res_.token_ids)) % 10000}", flush=True)
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:6s} median {m:.2f} ms/token ({ar / m:.2f}x ar), outside the passes {statistics.median(out[v]):.3f} ms/token")
