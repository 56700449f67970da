"""`ar` and `triforce` at S tokens, T, interleaved in one process: ms/token and each level's (passes, tokens fed, seconds,
drafted, accepted) per request. python levels.py S T NEW ROUNDS"""
import os, sys, dataclasses, statistics, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
t0 = time.time()
args, eng, run, ids = triforce_request(S, T, NEW)
variants = {"ar": dict(mode="ar"), "tf": dict()}
res = {v: [] for v in variants}
for v, kw in variants.items():
    eng.generate(ids, dataclasses.replace(run, **kw))
print("setup", time.time() - t0, flush=True)
for r in range(R):
    for v, kw in variants.items():
        t1 = time.perf_counter()
        st = eng.generate(ids, dataclasses.replace(run, seed=r, **kw)).stats
        wall = time.perf_counter() - t1
        res[v].append(st["ms_per_token"])
        lv = st["levels"]
        tot = sum(x["seconds"] for x in lv.values())
        print(f"  {v:3s} {st['ms_per_token']:.2f} ms/tok wall {wall:.3f} levels {tot:.3f} | " + "; ".join(f"{n} {x['passes']} {x['fed_tokens']} {x['seconds']:.3f} {x['drafted']} {x['accepted']}" for n, x in lv.items()), flush=True)
        if r == 0 and v == "tf": print("   keys", sorted(st.keys()), st.get("gamma"))
for v in variants: print(v, "median", statistics.median(res[v]))
