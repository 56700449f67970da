"""cProfile of ROUNDS `triforce` requests (python profile_request.py S T NEW ROUNDS)."""
import os, dataclasses, sys, cProfile, pstats, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
eng.generate(ids, run)
pr = cProfile.Profile()
t = time.perf_counter()
pr.enable()
for r in range(R):
    st = eng.generate(ids, dataclasses.replace(run, seed=300 + r)).stats
pr.disable()
print("wall", time.perf_counter() - t, "ms/token", st["ms_per_token"])
ps = pstats.Stats(pr); ps.sort_stats("tottime").print_stats(30); ps.print_callers("gather|zeros|float|cat|torch.tensor|write_layer|mean")
