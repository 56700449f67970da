# attention over a retrieval-sized cache, each layer's K/V cold (a 256 MB read between passes): variants interleaved
import glob, importlib.util, sys, time, statistics, torch
mods = {}
for n in sys.argv[1].split(","):
    so = glob.glob(__import__("os").environ.get("VARDIR", "/tmp/r39/var") + f"/b_{n}/{n}*.so")[0]
    spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); mods[n] = m
torch.set_num_threads(2)
S = int(sys.argv[2]) if len(sys.argv) > 2 else 1025
q = torch.randn(1, 9, 1, 64).bfloat16()
K = torch.randn(30, 1, 3, S + 64, 64).bfloat16(); V = torch.randn(30, 1, 3, S + 64, 64).bfloat16()
big = torch.randn(64 * 2**20)
res = {n: [] for n in mods}
for r in range(15):
    for n, m in mods.items():
        big.sum()
        t = time.perf_counter()
        for l in range(30): m.attend(q, K[l, :, :, :S], V[l, :, :, :S], 0.125)
        res[n].append((time.perf_counter() - t) * 1e3)
print(f"S={S} 30 layers cold: " + "  ".join(f"{n} {statistics.median(v):.3f} ms" for n, v in res.items()))
