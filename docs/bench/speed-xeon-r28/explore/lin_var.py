"""A model's decoder linears (packed, bf16 or fp32) at N rows, builds of this tree's layer_cpu.cpp
with sed edits (name=SED) or other files (name=@FILE), interleaved; outputs asserted equal. python lin_var.py DTYPE REPS name=SED ..."""
import statistics, subprocess, sys, tempfile, time
from pathlib import Path
import torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC, layer_cpu
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.ops import PackedLinear
torch.set_num_threads(2)
dtype, reps = sys.argv[1], int(sys.argv[2])
engine = Engine(RunConfig(mode="ar", dtype=dtype))
lins = [m for n, m in engine.model.named_modules() if isinstance(m, PackedLinear) and "layers" in n]
tdt = lins[0].packed.dtype
unit = 2 if tdt == torch.bfloat16 else 1
mods = {"base": layer_cpu()}
for spec in sys.argv[3:]:
    name, expr = spec.split("=", 1)
    d = Path(tempfile.mkdtemp()); f = d / "layer.cpp"
    f.write_text(Path(expr[1:]).read_text() if expr.startswith("@") else (CSRC / "layer_cpu.cpp").read_text())
    if not expr.startswith("@"): subprocess.run(["sed", "-i", "-E", expr, str(f)], check=True)
    mods[name] = cpp_extension.load(name=f"tf_linv_{name}", sources=[str(f)], build_directory=str(d),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
Ns = (1, 4, 8)
K = lambda l: l.packed.shape[1] * unit
xs = {N: {K(l): torch.randn(N, K(l)).to(tdt) for l in lins} for N in Ns}
def run(m, N):
    t0 = time.perf_counter()
    for l in lins:
        m.linear_packed(xs[N][K(l)], l.packed, l.bias, l.out_features)
    return time.perf_counter() - t0
for N in Ns:
    ref = [mods["base"].linear_packed(xs[N][K(l)], l.packed, l.bias, l.out_features) for l in lins[:4]]
    for m in mods.values():
        if not all(torch.equal(m.linear_packed(xs[N][K(l)], l.packed, l.bias, l.out_features), r) for l, r in zip(lins[:4], ref)): print("differs from base:", N)
ts = {(n, N): [] for n in mods for N in Ns}
for rep in range(reps):
    for N in Ns:
        for n, m in (list(mods.items()) if rep % 2 else list(reversed(mods.items()))):
            ts[(n, N)].append(run(m, N))
print(f"{dtype}: {len(lins)} linears, {sum(l.packed.numel() * l.packed.element_size() for l in lins) / 1e6:.0f} MB")
for N in Ns:
    print(f"N={N}: " + "  ".join(f"{n} {statistics.median(ts[(n, N)])*1e3:.2f} ({min(ts[(n, N)])*1e3:.2f})" for n in mods), flush=True)
