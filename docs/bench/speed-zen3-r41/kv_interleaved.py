# attention variants with K and V interleaved per key (views of one [L, 1, 3, S, 2, 64] tensor) or separate
import os, sys, glob, importlib.util, statistics, time, torch
mods = {}
for n in sys.argv[1].split(","):
    so = glob.glob(f"/tmp/r41/var/b_{n}/{n}*.so")[0]
    spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); mods[n] = m
torch.set_num_threads(2)
for S, T in [tuple(map(int, x.split(":"))) for x in sys.argv[2].split(",")]:
    q = torch.randn(1, 9, T, 64).bfloat16()
    KV = torch.randn(30, 1, 3, S, 2, 64).bfloat16()
    Ks = torch.randn(30, 1, 3, S, 64).bfloat16(); Vs = torch.randn(30, 1, 3, S, 64).bfloat16()
    ts = {}
    for r in range(5):
        for n, m in mods.items():
            for lay in ("sep", "int"):
                t0 = time.perf_counter()
                for L in range(30):
                    if lay == "sep": m.attend(q, Ks[L], Vs[L], 0.125)
                    else: m.attend(q, KV[L, :, :, :, 0], KV[L, :, :, :, 1], 0.125)
                ts.setdefault((n, lay), []).append((time.perf_counter() - t0) / 30)
    print(f"S={S} T={T}: " + "  ".join(f"{n}/{lay} {statistics.median(t)*1e3:.3f}" for (n, lay), t in ts.items()), flush=True)
