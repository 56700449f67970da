"""A request's set-up after a kept prefill, in place (this commit) against a fresh zeroed cache and a copy
(the path before it: full_cache allocating), interleaved: python setup_ab2.py S NEW REPS."""
import os, sys, time, statistics, dataclasses
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime.engine import Engine
from triforce.runtime.cache_full import FullCache
S, NEW, REPS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
args, eng, run, ids = triforce_request(S, 0.0, NEW)
eng.generate(ids, run)
lend = Engine.full_cache
def fresh(self, rope, capacity, on_chip):
    return FullCache(self.cfg, rope, 1, capacity, self.device, self.model.dtype)
res = {"copy": ([], []), "in place": ([], [])}
for r in range(REPS):
    for name, fc in (("copy", fresh), ("in place", lend)):
        Engine.full_cache = fc
        t = time.perf_counter()
        st = eng.generate(ids, dataclasses.replace(run, seed=r)).stats
        req = time.perf_counter() - t
        res[name][0].append(st["prefill_s"]); res[name][1].append(req)
        print(f"rep {r} {name:8s}: set-up {1e3 * st['prefill_s']:.1f} ms, request {req:.3f} s ({st['ms_per_token']} ms/token)", flush=True)
for name, (pre, req) in res.items():
    print(f"{name}: median set-up (prefill_s) {1e3 * statistics.median(pre):.1f} ms, request {1e3 * statistics.median(req):.1f} ms")
