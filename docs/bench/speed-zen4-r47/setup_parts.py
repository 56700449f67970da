"""A request's set-up after a kept prefill, in its parts (python setup_parts.py S)."""
import sys, os, time, statistics, dataclasses
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
import torch
from triforce.runtime.cache_full import FullCache
S = int(sys.argv[1])
args, eng, run, ids = triforce_request(S, 0.0, 128)
eng.generate(ids, run)
parts = {}
import triforce.runtime.cache_retrieval as CR, triforce.runtime.cache_full as CF, triforce.runtime.cache_streaming as CS
def timed(cls, name):
    orig = getattr(cls, name)
    def f(self, *a, **k):
        t = time.perf_counter(); r = orig(self, *a, **k); parts.setdefault(f"{cls.__name__}.{name}", []).append(time.perf_counter() - t); return r
    setattr(cls, name, f)
timed(CR.RetrievalCache, "fill_from"); timed(CF.FullCache, "fill_from"); timed(CF.FullCache, "__init__"); timed(CR.RetrievalCache, "__init__")
for _ in range(int(os.environ.get("REPS", 5))):
    t = time.perf_counter()
    stack, _ = eng.build_stack(run, len(ids) + 128)
    t1 = time.perf_counter()
    eng.prefill(stack, ids, None)
    t2 = time.perf_counter()
    parts.setdefault("build_stack", []).append(t1 - t); parts.setdefault("prefill (restore + fill lower levels)", []).append(t2 - t1)
    del stack
for k, v in parts.items(): print(f"{k}: {1e3 * statistics.median(v):.1f} ms (n={len(v)})")
import cProfile, pstats
stack, _ = eng.build_stack(run, len(ids) + 128)
pr = cProfile.Profile(); pr.enable()
for _ in range(3):
    stack, _ = eng.build_stack(run, len(ids) + 128); eng.prefill(stack, ids, None)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_callers("zeros|gather")
