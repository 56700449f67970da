"""fp32 silu_mul: HEAD~'s build (scalar std::exp) against this tree's (exp_ps), per call and max difference.
usage: git show a89efac:runtime/csrc/layer_cpu.cpp > /tmp/r22/oldlayer/layer_cpu.cpp (and simd.h); python silu_fp32.py"""
import torch, time, os
from torch.utils import cpp_extension
from triforce.runtime import native
torch.set_num_threads(2)
os.makedirs("/tmp/r22/b_oldlayer", exist_ok=True)
old = cpp_extension.load(name="old_layer", sources=["/tmp/r22/oldlayer/layer_cpu.cpp"], build_directory="/tmp/r22/b_oldlayer",
    extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native"], extra_ldflags=["-fopenmp"])
new = native.layer_cpu()
for T in (1, 8, 1024):
    gg = torch.randn(T, 1536); uu = torch.randn(T, 1536)
    res = {}
    for name, m in (("old", old), ("new", new)) * 3:
        for _ in range(20): m.silu_mul(gg, uu)
        n = 2000 if T < 100 else 50
        t0 = time.perf_counter()
        for _ in range(n): m.silu_mul(gg, uu)
        res.setdefault(name, []).append((time.perf_counter() - t0) / n * 1e6)
    print(f"T={T}: old {min(res['old']):.2f} us, new {min(res['new']):.2f} us per call; "
          f"max |diff| {(old.silu_mul(gg, uu) - new.silu_mul(gg, uu)).abs().max().item():.2e}")
