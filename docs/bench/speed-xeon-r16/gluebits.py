import os, sys, tempfile, torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC
mods = [cpp_extension.load(name=f"gb_{i}", sources=[os.path.abspath(p)], build_directory=tempfile.mkdtemp(),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"]) for i, p in enumerate(sys.argv[1:3])]
a, b = mods
bad = 0
g = torch.Generator().manual_seed(0)
for trial in range(300):
    T = int(torch.randint(1, 20, (1,), generator=g)); E = [576, 64, 100, 960][trial % 4]
    x = (torch.randn(T, E, generator=g) * float(torch.rand(1, generator=g) * 10)).bfloat16()
    if trial % 7 == 0: x[0, :5] = 0; x[0, 5] = -0.0
    w = torch.randn(E, generator=g).bfloat16()
    if not torch.equal(a.rms_norm(x, w, 1e-5), b.rms_norm(x, w, 1e-5)): bad += 1
    q = (torch.randn(1, 9, T, 64, generator=g) * 3).bfloat16(); cos = torch.randn(1, T, 64, generator=g).bfloat16(); sin = torch.randn(1, T, 64, generator=g).bfloat16()
    if trial % 5 == 0: q[..., :3] = 0; q[..., 40] = -0.0
    oa, ob = torch.empty_like(q), torch.empty_like(q)
    a.rope(q, cos, sin, oa); b.rope(q, cos, sin, ob)
    if not torch.equal(oa.view(torch.int16), ob.view(torch.int16)): bad += 1
print("differing cases:", bad)
