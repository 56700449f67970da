"""The certified head's pieces timed (certified_head.patch applied): the dense head, the int8 ranking, the fp32
channels, the candidates, cold (after a 64 MB sweep) and hot, and a cProfile of the greedy call; candidates per call
in a 2K request. python head_parts.py"""
import sys, time, torch
sys.path.insert(0, "docs/bench/speed-zen4-r45")
from common import triforce_request
from triforce.runtime import native
args, eng, run, ids = triforce_request(2000, 0.0, 32)
eng.generate(ids, run)
head = eng.model.lm_head
seen = []
orig = head.greedy
head.greedy = lambda x: (seen.append(x.detach().clone()), orig(x))[1]
eng.generate(ids, run)
del head.greedy
rest, out, ranking, w_out, e, a, wmax = head._parts
layer = native.layer_cpu()
import triforce.runtime.greedy_head as G
counts = []
real_cc = layer.certified_candidates
def spy(*args):
    r = real_cc(*args); counts.append(int(r[1].max())); return r
layer.certified_candidates = spy
for s in seen: head.greedy(s)
layer.certified_candidates = real_cc
print("candidates per call:", sorted(counts))
x = seen[5].reshape(-1, 576)[:1]
xf = x.float(); xr = xf.index_select(1, rest).contiguous()
ap = ranking(xr)
def t(name, f, n=300):
    for _ in range(10): f()
    s = time.perf_counter()
    for _ in range(n): f()
    print(f"{name:14s} {(time.perf_counter() - s) / n * 1e6:8.1f} us")
big = torch.ones(64 * 2**20 // 4)
def cold(f):
    def g():
        big.add_(1.0)
        f()
    return g
t("evict only", lambda: big.add_(1.0), 20)
t("dense", cold(lambda: head.dense(x)), 20)
t("greedy", cold(lambda: head.greedy(x)), 20)
t("ranking", cold(lambda: ranking(xr)), 20)
t("addmm", cold(lambda: ap.clone().addmm_(xf.index_select(1, out), w_out)), 20)
t("greedy hot", lambda: head.greedy(x))
t("dense hot", lambda: head.dense(x))
t("ranking hot", lambda: ranking(xr))
t("addmm hot", lambda: ap.clone().addmm_(xf.index_select(1, out), w_out))
t("mm hot", lambda: xf.index_select(1, out) @ w_out)
al = torch.tensor([10.0]); be = torch.tensor([0.5]); mg = torch.tensor([0.01])
t("candidates", lambda: layer.certified_candidates(ap, e, a, al, be, mg, 2048))
t("isfinite", lambda: bool(torch.isfinite(ap).all()))
import cProfile, pstats
pr = cProfile.Profile(); pr.enable()
for _ in range(300): head.greedy(x)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(18)
