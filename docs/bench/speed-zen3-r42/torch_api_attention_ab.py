# usage: OLD_CSRC=<checkout of 8e4c999>/runtime/csrc NEW_CSRC=runtime/csrc python torch_api_attention_ab.py
# old (torch/extension.h) against new (torch_api.h) attention builds, interleaved in one process
import time, torch
from torch.utils import cpp_extension
torch.set_num_threads(2)
mods = {}
for side, d in (("old", "" + __import__("os").environ["OLD_CSRC"] + ""), ("new", "" + __import__("os").environ["NEW_CSRC"] + "")):
    import os; os.makedirs(f"/tmp/torch_api_ab/b_{side}", exist_ok=True)
    mods[side] = cpp_extension.load(name=f"ab_attn_{side}", sources=[f"{d}/attention_cpu.cpp"], build_directory=f"/tmp/torch_api_ab/b_{side}",
                                    extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native"], extra_ldflags=["-fopenmp"])
L = 30
for S, T in ((32000, 1), (8000, 1), (8000, 4)):
    ks = [torch.randn(1, 3, S, 64).bfloat16() for _ in range(L)]; vs = [torch.randn(1, 3, S, 64).bfloat16() for _ in range(L)]
    q = torch.randn(1, 9, T, 64).bfloat16()
    outs = {s: m.attend(q, ks[0], vs[0], 0.125) for s, m in mods.items()}
    assert torch.equal(outs["old"], outs["new"])
    best = {s: [] for s in mods}
    for r in range(6):
        for s, m in mods.items():
            t = time.perf_counter()
            for i in range(L): m.attend(q, ks[i], vs[i], 0.125)
            best[s].append((time.perf_counter() - t) * 1000)
    print(f"S={S} T={T} 30 layers ms: " + "  ".join(f"{s} median {sorted(v)[3]:.2f} min {min(v):.2f}" for s, v in best.items()))
