"""The int4 middle level's linears (decoder layers int4, head int8) at N rows, builds of quant_cpu.cpp
(this tree's, then files), interleaved; outputs asserted equal. python q_var.py REPS name=@FILE ..."""
import statistics, sys, tempfile, time
from pathlib import Path
import torch
from torch.utils import cpp_extension
from triforce.runtime import native
from triforce.runtime.native import CSRC
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import Int4Linear, Int8Linear
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", middle_weights="int4")
engine = Engine(run)
middle = engine.level_model(run, "middle")
lins = [(m, isinstance(m, Int4Linear)) for m in middle.modules() if isinstance(m, (Int4Linear, Int8Linear))]
mods = {"base": native.quant_cpu()}
for spec in sys.argv[2:]:
    name, f0 = spec.split("=", 1)
    d = Path(tempfile.mkdtemp()); f = d / "quant.cpp"; f.write_text(Path(f0[1:]).read_text())
    mods[name] = cpp_extension.load(name=f"tf_q_{name}", sources=[str(f)], build_directory=str(d),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
def call(mod, l, int4, x):
    b = l._parameters.get("bias")
    return mod.int4_linear(x, l.packed, b, l.out_features) if int4 else mod.int8_linear(x, l.packed, l.scales, b, l.out_features)
Ns = (1, 2, 4)
xs = {N: {l.in_features: torch.randn(N, l.in_features).bfloat16() for l, _ in lins} for N in Ns}
for N in Ns:
    for l, i4 in lins[:6] + lins[-1:]:
        ref = call(mods["base"], l, i4, xs[N][l.in_features])
        for m in mods.values():
            assert torch.equal(call(m, l, i4, xs[N][l.in_features]), ref)
def run_all(m, N):
    t0 = time.perf_counter()
    for l, i4 in lins:
        call(m, l, i4, xs[N][l.in_features])
    return time.perf_counter() - t0
ts = {(n, N): [] for n in mods for N in Ns}
for rep in range(int(sys.argv[1])):
    for N in Ns:
        for n, m in (list(mods.items()) if rep % 2 else list(reversed(mods.items()))):
            ts[(n, N)].append(run_all(m, N))
print(f"{len(lins)} linears ({sum(i for _, i in lins)} int4)")
for N in Ns:
    print(f"N={N}: " + "  ".join(f"{n} {statistics.median(ts[(n, N)])*1e3:.3f} ({min(ts[(n, N)])*1e3:.3f})" for n in mods), flush=True)
