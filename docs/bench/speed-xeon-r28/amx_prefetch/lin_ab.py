"""The target's 120 decoder linears (packed bf16, AMX) at N rows, builds of layer_cpu.cpp with a
software prefetch of the weight stream in packed_amx (PF_AMX_BYTES ahead, hint), interleaved."""
import statistics, sys, tempfile, time
from pathlib import Path
import torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.ops import PackedLinear
torch.set_num_threads(2)
engine = Engine(RunConfig(mode="ar", dtype="bf16"))
lins = [m for n, m in engine.model.named_modules() if isinstance(m, PackedLinear) and "layers" in n]
src = Path(sys.argv[2]).read_text()
variants = {"none": []}
for spec in sys.argv[3:]:
    nbytes, hint = spec.split(":")
    variants[spec] = [f"-DPF_AMX_BYTES={nbytes}", f"-DPF_AMX_HINT={hint}"]
mods = {}
for name, defs in variants.items():
    d = Path(tempfile.mkdtemp()); f = d / "layer.cpp"; f.write_text(src)
    mods[name] = cpp_extension.load(name=f"tf_lin_{len(mods)}", sources=[str(f)], build_directory=str(d),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}", *defs], extra_ldflags=["-fopenmp"])
Ns = (1, 4, 8)
xs = {N: {l.packed.shape[1] * 2: torch.randn(N, l.packed.shape[1] * 2).bfloat16() for l in lins} for N in Ns}
def run(m, N):
    t0 = time.perf_counter()
    for l in lins:
        m.linear_packed(xs[N][l.packed.shape[1] * 2], l.packed, l.bias, l.out_features)
    return time.perf_counter() - t0
ref = {N: [mods["none"].linear_packed(xs[N][l.packed.shape[1] * 2], l.packed, l.bias, l.out_features) for l in lins[:4]] for N in Ns}
for name, m in mods.items():
    for N in Ns:
        assert all(torch.equal(m.linear_packed(xs[N][l.packed.shape[1] * 2], l.packed, l.bias, l.out_features), r) for l, r in zip(lins[:4], ref[N]))
ts = {(n, N): [] for n in mods for N in Ns}
for rep in range(int(sys.argv[1])):
    for N in Ns:
        for n, m in (mods.items() if rep % 2 else reversed(mods.items())):
            ts[(n, N)].append(run(m, N))
for N in Ns:
    print(f"N={N}: " + "  ".join(f"{n} {statistics.median(ts[(n, N)])*1e3:.2f} ({min(ts[(n, N)])*1e3:.2f})" for n in mods), flush=True)
