"""Where a middle-level (retrieval) pass spends its time outside the decoder layers: cProfile of N
T-token passes of the model forward and of Level.feed's path, at S tokens (as the passes suite builds
the levels). python midprof.py S T N"""
import os, sys, cProfile, pstats, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
import torch
from triforce.runtime.bench.passes import built_levels
S, T, N = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
args, eng, run, ids = triforce_request(S, 0.0, 16)
with torch.inference_mode():
    levels = built_levels(eng, run, ids, S)
    mid = levels["retrieval"]
    x = torch.tensor([ids[S - T:S]])
    n = mid.cache.get_seq_length()
    def one():
        mid.model(x, mid.cache); mid.cache.crop(n)
    for _ in range(20): one()
    t = time.perf_counter()
    for _ in range(N): one()
    print(f"model forward T={T}: {1000 * (time.perf_counter() - t) / N:.3f} ms", flush=True)
    pr = cProfile.Profile(); pr.enable()
    for _ in range(N): one()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)
