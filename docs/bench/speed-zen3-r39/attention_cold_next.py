# a middle-level-like pass: per layer, 2.2 MB of "weights" read (the int4 linears), then attention over
# S keys of that layer's K/V; nx with set_next(layer stride) prefetches the next layer's K/V in its scores loop
import glob, importlib.util, sys, time, statistics, torch
mods = {}
for n in sys.argv[1].split(","):
    so = glob.glob(__import__("os").environ.get("VARDIR", "/tmp/r39/var") + f"/b_{n}/{n}*.so")[0]
    spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); mods[n] = m
torch.set_num_threads(2)
S = int(sys.argv[2])
q = torch.randn(1, 9, 1, 64).bfloat16()
K = torch.randn(30, 1, 3, S + 64, 64).bfloat16(); V = torch.randn(30, 1, 3, S + 64, 64).bfloat16()
W = torch.randn(30, 2_200_000 // 4)          # each layer's weights, read once per pass
big = torch.randn(64 * 2**20)
res = {n: [] for n in mods}; att = {n: [] for n in mods}
for r in range(12):
    for n, m in mods.items():
        big.sum()
        ta = 0.0
        t = time.perf_counter()
        for l in range(30):
            W[l].sum()
            if hasattr(m, "set_next"): m.set_next(K.stride(0) * 2 if l < 29 else 0)
            t1 = time.perf_counter()
            m.attend(q, K[l, :, :, :S], V[l, :, :, :S], 0.125)
            ta += time.perf_counter() - t1
        res[n].append((time.perf_counter() - t) * 1e3); att[n].append(ta * 1e3)
print(f"S={S}: " + "  ".join(f"{n} pass {statistics.median(v):.3f} ms (attention {statistics.median(att[n]):.3f})" for n, v in res.items()))
