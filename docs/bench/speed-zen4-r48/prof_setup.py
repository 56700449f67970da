import os, sys, cProfile, pstats
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
S = int(sys.argv[1])
args, eng, run, ids = triforce_request(S, 0.0, 16)
eng.generate(ids, run)
pr = cProfile.Profile()
for r in range(4):
    stack, _ = eng.build_stack(run, run.capacity_for(len(ids)))
    pr.enable(); eng.prefill(stack, ids, None); pr.disable()
    del stack
pstats.Stats(pr).sort_stats("cumtime").print_stats(25)
