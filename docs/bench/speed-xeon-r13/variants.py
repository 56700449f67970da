# usage: python variants.py S[,S..] T[,T..] REPEATS name=SED_EXPR | name=@FILE ...  (variants of runtime/csrc/attention_cpu.cpp, interleaved against the built one; round 13)
"""Build variants of attention_cpu.cpp (sed edits) and time 30 layers interleaved.
usage: variants.py S T1,T2.. reps name=sedexpr ..."""
import os, sys, statistics, tempfile, subprocess, itertools, time
from pathlib import Path
import torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC, attention_cpu
from triforce.runtime.bench.measure import interleaved, timed


def build(specs, base=True, tag="att"):
    """{name: module} for each 'name=SED_EXPR' (applied to this tree's attention_cpu.cpp) or
    'name=@FILE', built for this CPU; base: the project's own build first, as "base"."""
    src = (CSRC / "attention_cpu.cpp").read_text()
    mods = {"base": attention_cpu()} if base else {}
    for spec in specs:
        name, expr = spec.split("=", 1)
        d = Path(tempfile.mkdtemp(prefix=f"var-{name}-")); f = d / f"{tag}_{name}.cpp"
        f.write_text(Path(expr[1:]).read_text() if expr.startswith("@") else src)
        if expr and not expr.startswith("@"): subprocess.run(["sed", "-i", "-E", expr, str(f)], check=True)
        mods[name] = cpp_extension.load(name=f"tf_{tag}_{name}", sources=[str(f)], build_directory=str(d),
            extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
    return mods


def main():
    torch.set_num_threads(2)
    S = [int(s) for s in sys.argv[1].split(",")]; Ts = [int(t) for t in sys.argv[2].split(",")]; reps = int(sys.argv[3])
    mods = build(sys.argv[4:])
    for s in S:
        layers = [(torch.randn(1, 3, s, 64).bfloat16(), torch.randn(1, 3, s, 64).bfloat16()) for _ in range(30)]
        for T in Ts:
            q = torch.randn(1, 9, T, 64).bfloat16()
            ref = mods["base"].attend(q, *layers[0], 0.125)
            for n, m in mods.items():
                out = m.attend(q, *layers[0], 0.125)
                if not torch.equal(out, ref): print(f"  {n}: differs from base (max {(out.float()-ref.float()).abs().max():.3g})")
            fns = {n: (lambda m=m: [m.attend(q, k, v, 0.125) for k, v in layers]) for n, m in mods.items()}
            raw = interleaved({k: timed(f) for k, f in fns.items()}, reps)
            t = {k: statistics.median(v) * 1e3 for k, v in raw.items()}
            mn = {k: min(v) * 1e3 for k, v in raw.items()}
            floor = 30 * 2 * 3 * s * 64 * 2 / 33e9 * 1e3
            print(f"S={s} T={T} (floor {floor:.2f}): " + "  ".join(f"{n} {v:.2f} ({mn[n]:.2f})" for n, v in t.items()), flush=True)


if __name__ == "__main__":
    main()
