# rms_norm and rope of two layer_cpu.cpp builds on the same rows: OLD=path/to/old/layer_cpu.cpp python glue_ab.py
import os, torch, time
from torch.utils.cpp_extension import load
from triforce.runtime import native
old = load(name="layer_cpu_old", sources=[os.environ["OLD"]], extra_include_paths=[str(native.CSRC)], build_directory="/tmp/glue_ab_old",
           extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", "-w"], extra_ldflags=["-fopenmp"])
new = native.layer_cpu()
torch.manual_seed(0)
for dt in (torch.bfloat16, torch.float32):
    x = torch.randn(3, 576).to(dt); w = (1 + 0.1 * torch.randn(576)).to(dt)
    a, b = old.rms_norm(x, w, 1e-5), new.rms_norm(x, w, 1e-5)
    print(dt, "rms max diff", (a.float() - b.float()).abs().max().item(), "ref", (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-5)).to(dt).float().mul(w.float()).sub(b.float()).abs().max().item())
    q = torch.randn(1, 9, 2, 64).to(dt); cos = torch.randn(1, 2, 64).to(dt); sin = torch.randn(1, 2, 64).to(dt)
    o1 = torch.empty_like(q); o2 = torch.empty_like(q)
    old.rope(q, cos, sin, o1); new.rope(q, cos, sin, o2)
    print(dt, "rope max diff", (o1.float() - o2.float()).abs().max().item())
