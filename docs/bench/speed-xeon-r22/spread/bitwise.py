"""Two builds of attention_cpu.cpp give bit-identical outputs. usage: bitwise.py OLD_DIR NEW_DIR"""
import os, sys, itertools, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import load
torch.set_num_threads(2)
a, b = load(sys.argv[1], "old"), load(sys.argv[2], "new")
bad = n = 0
for dt, S, T, G, layout in itertools.product([torch.float32, torch.float16, torch.bfloat16],
        [1, 63, 64, 65, 129, 200, 511, 513, 1023, 1025, 1100, 2100, 3000, 5000],
        [1, 2, 3, 8, 17, 32, 100], [1, 3, 8], ["bhsd", "bshd"]):
    if T > S: continue
    Hkv = 2; H = Hkv * G; D = 64
    g = torch.Generator().manual_seed(S * 1000 + T)
    q = torch.randn(1, H, T, D, generator=g).to(dt)
    if layout == "bhsd":
        k = torch.randn(1, Hkv, S, D, generator=g).to(dt); v = torch.randn(1, Hkv, S, D, generator=g).to(dt)
    else:
        k = torch.randn(1, S, Hkv, D, generator=g).to(dt).transpose(1, 2); v = torch.randn(1, S, Hkv, D, generator=g).to(dt).transpose(1, 2)
    for dot in ([False, True] if dt == torch.bfloat16 else [False]):
        x = a.attend(q, k, v, 0.125, dot); y = b.attend(q, k, v, 0.125, dot); n += 1
        if not torch.equal(x, y):
            bad += 1; print("DIFF", dt, S, T, G, layout, dot, (x.float() - y.float()).abs().max().item())
print(f"{n} cases, {bad} differ")
