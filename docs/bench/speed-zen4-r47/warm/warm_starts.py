"""Warming the next layer's attention item starts (the first N rows of each 512-key chunk of each KV head, prefetched
while a ~1.4 MB memory stream stands in for the MLP), against the same loop without: python warm_starts.py S N"""
import os, tempfile, torch, time, statistics, sys
from torch.utils import cpp_extension
from triforce.runtime import native
torch.set_num_threads(2)
w = cpp_extension.load(name="warmx", sources=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "warm.cpp")], build_directory=tempfile.mkdtemp(), extra_cflags=["-O3", "-march=native"])
m = native.attention_cpu()
S, L = int(sys.argv[1]), 30
kv = [(torch.randn(1, 3, S, 64).bfloat16(), torch.randn(1, 3, S, 64).bfloat16()) for _ in range(L)]
flush = torch.ones(32 * 2**20)
mlp = [torch.ones(350 * 1024) for _ in range(30)]   # ~1.4 MB a layer, as the int4 MLP weights
starts = [0, 512, 1024]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 64
res = {"plain": [], "warm": []}
for rep in range(15):
    for name in res:
        q = torch.randn(1, 9, 1, 64).bfloat16()
        flush.sum()
        tot = 0.0
        t0 = time.perf_counter()
        for l in range(L):
            if l + 1 < L: w.warm(kv[l + 1][0], kv[l + 1][1], starts, N if name == "warm" else 0)
            mlp[l].sum()
            t = time.perf_counter(); m.attend(q, kv[l][0], kv[l][1], 0.125); tot += time.perf_counter() - t
        res[name].append((tot, time.perf_counter() - t0))
for k, v in res.items(): print(S, k, "attention %.3f ms, whole loop %.3f ms a pass (30 layers)" % (1e3 * statistics.median([a for a, b in v]), 1e3 * statistics.median([b for a, b in v])))
