import os, sys, time, statistics, tempfile, torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC
torch.set_num_threads(2)
srcs = dict(a.split("=") for a in sys.argv[1].split(","))
mods = {n: cpp_extension.load(name=f"glue_{n}", sources=[os.path.abspath(p)], build_directory=tempfile.mkdtemp(),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"]) for n, p in srcs.items()}
for T in (1, 4, 8):
    x = torch.randn(T, 576).bfloat16(); w = torch.randn(576).bfloat16()
    q = torch.randn(1, 9, T, 64).bfloat16(); k = torch.randn(1, 3, T, 64).bfloat16()
    cos = torch.randn(1, T, 64).bfloat16(); sin = torch.randn(1, T, 64).bfloat16()
    qo = torch.empty_like(q); ko = torch.empty(1, 3, 100, 64).bfloat16()
    outs = {}
    for n, m in mods.items():   # 30 layers' worth: 2 norms, rope of q and k
        def f(m=m):
            for _ in range(30):
                m.rms_norm(x, w, 1e-5); m.rms_norm(x, w, 1e-5)
                m.rope(q, cos, sin, qo); m.rope(k, cos, sin, ko.narrow(2, 4, T))
        outs[n] = f
    ts = {n: [] for n in mods}
    for r in range(41):
        for n, f in outs.items():
            t = time.perf_counter(); f(); ts[n].append(time.perf_counter() - t)
    print(f"T={T}: " + "  ".join(f"{n} {statistics.median(v) * 1e3:.3f} ms" for n, v in ts.items()), flush=True)
    a, b = list(mods.values())[:2]
    oa, ob = torch.empty_like(q), torch.empty_like(q)
    a.rope(q, cos, sin, oa); b.rope(q, cos, sin, ob)
    print("  rms_norm max diff", (a.rms_norm(x, w, 1e-5).float() - b.rms_norm(x, w, 1e-5).float()).abs().max().item(),
          " rope equal", torch.equal(oa, ob), flush=True)
