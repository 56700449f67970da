"""Attention builds side by side, each compiled by this harness (no build-placement bias between them)."""
import os, sys, time, statistics, tempfile, torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC
torch.set_num_threads(2)
srcs = dict(a.split("=") for a in sys.argv[1].split(","))
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 9
mods = {n: cpp_extension.load(name=f"three_{n}", sources=[os.path.abspath(p)], build_directory=tempfile.mkdtemp(),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"]) for n, p in srcs.items()}
first = next(iter(mods))
for S in (7200, 32000):
    layers = [(torch.randn(1, 3, S, 64).bfloat16(), torch.randn(1, 3, S, 64).bfloat16()) for _ in range(30)]
    for T in (1, 2, 4, 5, 6, 8, 10, 1024):
        q = torch.randn(1, 9, T, 64).bfloat16()
        use = layers if T < 1024 else layers[:1]
        ts = {n: [] for n in mods}
        for r in range(reps if T < 1024 else max(3, reps // 3)):
            for n, m in mods.items():
                t = time.perf_counter()
                for k, v in use: m.attend(q, k, v, 0.125)
                ts[n].append(time.perf_counter() - t)
        med = {n: statistics.median(v) * 1e3 for n, v in ts.items()}
        print(f"S={S:>6} T={T:>4}: " + "  ".join(f"{n} {m:7.2f}" + (f" ({med[first] / m:.2f}x)" if n != first else "") for n, m in med.items()), flush=True)
    del layers
