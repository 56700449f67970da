"""The target's 120 decoder linears and its head (bf16, packed, 1 row, 2 threads) against torch's sum of
the same packed weights, two builds of layer_cpu.cpp interleaved, one line per round for SECONDS.
usage: VAR=DIR python lin_phase.py SECONDS   (DIR/A.cpp = runtime/csrc/layer_cpu.cpp, DIR/D.cpp = the same
with linear_one_stream_probe.patch applied: a tile's four blocks read as one stream; its outputs are wrong,
its memory traffic is that of an interleaved layout)"""
import os, sys, time, torch, torch.nn as nn
from torch.utils.cpp_extension import load
from triforce.runtime import native
from triforce.runtime.ops import PackedLinear
VAR = os.environ["VAR"]
def build(name):
    d = f"{VAR}/build_{name}"; os.makedirs(d, exist_ok=True)
    return load(name=f"lin_{name}", sources=[f"{VAR}/{name}.cpp"], extra_include_paths=[str(native.CSRC)], build_directory=d,
                extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", "-w"], extra_ldflags=["-fopenmp"])
torch.set_num_threads(2)
kerns = {n: build(n) for n in ("A", "D")}
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)] * 30 + [(49152, 576)]
lin = [PackedLinear(nn.Linear(k, o, bias=False, dtype=torch.bfloat16)) for o, k in shapes]
xs = {k: torch.randn(1, k, dtype=torch.bfloat16) for k in (576, 1536)}
nb = sum(m.packed.numel() * 2 for m in lin)
def one(f):
    t = time.perf_counter(); f(); return time.perf_counter() - t
t_end = time.time() + float(sys.argv[1])
while time.time() < t_end:
    r = {"sum": min(one(lambda: [m.packed.view(-1).sum() for m in lin]) for _ in range(3))}
    for n, kern in kerns.items():
        r[n] = min(one(lambda: [kern.linear_packed(xs[m.in_features], m.packed, None, m.out_features) for m in lin]) for _ in range(3))
    print("  ".join(f"{n} {nb / v / 1e9:5.1f} GB/s" for n, v in r.items()),
          f" A/sum {r['A'] / r['sum']:.2f} D/sum {r['D'] / r['sum']:.2f} A/D {r['A'] / r['D']:.2f}", flush=True)
