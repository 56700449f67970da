"""Where a `triforce` request's own prefill goes on a kept prefill (the retrieval cache's fill from the target's
full cache, the drafter's window, the rest), per request: python own_prefill.py S T ROUNDS"""
import os, sys, collections, dataclasses, functools, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import engine as E
from triforce.runtime.cache_retrieval import RetrievalCache

S, T, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
args, eng, run, ids = triforce_request(S, T, 8)
spent = collections.Counter()


def timer(owner, name, label):
    f, static = getattr(owner, name), isinstance(owner.__dict__.get(name), staticmethod)

    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[label] += time.perf_counter() - t
    setattr(owner, name, staticmethod(g) if static else g)


timer(RetrievalCache, "fill_from", "retrieval fill_from")
timer(E.Engine, "_prefill_passes", "prefill passes (the drafter's window)")
timer(E.Engine, "prefill", "prefill in all")
eng.generate(ids, run)
for r in range(R):
    spent.clear()
    st = eng.generate(ids, dataclasses.replace(run, seed=r)).stats
    print(f"  own prefill {1000 * st['prefill_s']:.1f} ms: " + ", ".join(f"{k} {1000 * v:.1f}" for k, v in spent.items()), flush=True)
