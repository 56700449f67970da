"""Where a decode/verify call's attention time goes: runtime/csrc/attention_cpu.cpp built again with one
part knocked out (wrong outputs, timing only), every build timed interleaved in one process on 30 layers
of SmolLM2's K/V (bf16, H = 9, Hkv = 3, D = 64).
    base      the source as it is (twice: base and base2 show the noise between two builds of one source)
    noqk      the score products' vdpbf16ps replaced by an add (the K loads and packing stay)
    nopv      the P.V products' vdpbf16ps replaced by an add (V's loads and interleaving stay)
    noexp     exp2 left out of P (the rest of the softmax stays)
    notrans   K's 16 x 16 transposes left out of its packing (the loads and stores stay)
    nopass2   the P.V pass skipped altogether (scores, maxima and merge stay)
Garbage scores make exp and the products see odd values: read a knock-out's saving as a bound, and
prefer the ones that keep the data flowing (noqk, nopv, noexp, notrans, nopass2).
python knockout.py S T[,T...] VARIANT[,VARIANT...] [L3]   (L3: one layer's K/V read 30 times, from the cache)
REPS=N (environment): interleaved repeats (default 7)."""
import os, pathlib, shutil, statistics, sys, tempfile, time
import torch
from torch.utils import cpp_extension

CSRC = pathlib.Path(__file__).resolve().parents[3] / "runtime" / "csrc"
EDITS = {
    "base": [], "base2": [],
    "noqk": [("      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], qb, kv[j]);",
              "      for (int j = 0; j < 4; ++j) acc[r][j] = _mm512_add_ps(acc[r][j], (__m512)kv[j]);")],
    "nopv": [("      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], pb, vv[j]);\n    }\n  }\n  for (int r = 0; r < RB; ++r)\n"
              "    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(O + r * D + 16 * (j0 + j), acc[r][j]);\n}\n\n// ---- dot on AMX",
              "      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_add_ps(acc[r][j], (__m512)vv[j]);\n    }\n  }\n  for (int r = 0; r < RB; ++r)\n"
              "    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(O + r * D + 16 * (j0 + j), acc[r][j]);\n}\n\n// ---- dot on AMX")],
    "noexp": [("    x[j] = DOT ? exp2_p_ps(e, keep[j])", "    x[j] = DOT ? e")],
    "notrans": [("      transpose16(r);\n      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(Kp + (16 * h + j) * NB + 16 * g, r[j]);",
                 "      for (int j = 0; j < 16; ++j) _mm512_storeu_si512(Kp + (16 * h + j) * NB + 16 * g, r[j]);")],
    "nopass2": [("    for (int64_t rlo = 0, rhi; rlo < R; rlo = rhi) {", "    for (int64_t rlo = 0, rhi; rlo < (FUSED ? 0 : R); rlo = rhi) {")],
}


def build(name: str):
    source = (CSRC / "attention_cpu.cpp").read_text()
    for old, new in EDITS[name]:
        assert source.count(old) == 1, f"{name}: the source changed, the edit no longer applies"
        source = source.replace(old, new)
    directory = pathlib.Path(tempfile.mkdtemp(prefix=f"knockout-{name}-"))
    for header in CSRC.glob("*.h"):
        shutil.copy(header, directory)
    (directory / "attention_cpu.cpp").write_text(source)
    return cpp_extension.load(name=f"knockout_{name}", sources=[str(directory / "attention_cpu.cpp")], build_directory=str(directory),
                              extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{directory}"], extra_ldflags=["-fopenmp"])


S, Ts, names = int(sys.argv[1]), [int(t) for t in sys.argv[2].split(",")], sys.argv[3].split(",")
l3 = len(sys.argv) > 4 and sys.argv[4] == "L3"
torch.set_num_threads(2)
modules = {n: build(n) for n in names}
L = 30
kv = [(torch.randn(1, 3, S, 64).bfloat16(), torch.randn(1, 3, S, 64).bfloat16()) for _ in range(1 if l3 else L)]
res = {(n, T): [] for n in names for T in Ts}
for _ in range(int(os.environ.get("REPS", 7))):
    for T in Ts:
        q = torch.randn(1, 9, T, 64).bfloat16()
        for n, m in modules.items():
            t = time.perf_counter()
            for layer in range(L):
                k, v = kv[layer % len(kv)]
                m.attend(q, k, v, 0.125, None)
            res[(n, T)].append((time.perf_counter() - t) / L)
for T in Ts:
    print(f"S={S}{' (L3)' if l3 else ''} T={T}: " + "  ".join(f"{n} {1e3 * statistics.median(res[(n, T)]):.3f}" for n in names)
          + "  ms per layer (median)")
