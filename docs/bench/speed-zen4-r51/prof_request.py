"""cProfile of `ar` and `triforce` requests at S tokens (after a warm-up request each): what the decode spends
outside the native passes, by function. python prof_request.py S T NEW MODE"""
import os, sys, dataclasses, cProfile, pstats
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
S, T, NEW, MODE = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
args, eng, run, ids = triforce_request(S, T, NEW)
run = dataclasses.replace(run, mode=MODE)
eng.generate(ids, run)
pr = cProfile.Profile(); pr.enable()
for seed in range(3):
    st = eng.generate(ids, dataclasses.replace(run, seed=seed)).stats
pr.disable()
print(MODE, st["ms_per_token"])
pstats.Stats(pr).sort_stats("tottime").print_stats(45)
stats = pstats.Stats(pr).stats
inherent = ("logits", "linear_packed", "int4_linear", "int8_linear", "rescore_top", "rms_norm", "embedding")
rest = {f"{k[0].split('/')[-1]}:{k[1]}({k[2]})": v[2] for k, v in stats.items() if not any(n in k[2] for n in inherent)}
print(f"outside the passes: {1000 * sum(rest.values()) / 3:.1f} ms a request (tottime, cProfile's own overhead included)")
for name, t in sorted(rest.items(), key=lambda kv: -kv[1])[:40]:
    print(f"  {1000 * t / 3:7.2f} ms  {name}")
