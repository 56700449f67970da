# $QDIR/NAME.cpp: quant_cpu.cpp variants (q16 = runtime/csrc/quant_cpu.cpp). The int4 linears of the middle level (SmolLM2-135M shapes, 30 layers in turn, T rows), variants interleaved
import os, sys, glob, importlib.util, statistics, time, torch
from torch.utils.cpp_extension import load
names = sys.argv[1].split(",")
QDIR = os.environ.get("QDIR", "/tmp/r41/qv")
CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../runtime/csrc")
if sys.argv[1] == "build":
    n = sys.argv[2]
    load(name=n, sources=[f"{QDIR}/{n}.cpp"], extra_include_paths=[CSRC],
         extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", "-w"], extra_ldflags=["-fopenmp"],
         build_directory=f"{QDIR}/b_{n}", verbose=False); sys.exit(0)
T = int(sys.argv[2]) if len(sys.argv) > 2 else 1
mods = {}
for n in names:
    so = glob.glob(f"{QDIR}/b_{n}/{n}*.so")[0]
    spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); mods[n] = m
torch.set_num_threads(int(os.environ.get("TH", "2")))
m0 = mods[names[0]]
shapes = [(int(x.split("x")[0]), int(x.split("x")[1])) for x in os.environ.get("SHAPES", "960x576,576x576,3072x576,576x1536").split(",")]
import os
layers = [[(m0.quantize_int4(torch.randn(O, K).bfloat16() * 0.02), O, K) for O, K in shapes] for _ in range(int(os.environ.get("NL", "30")))]
layers = (layers * 30)[:30]
if os.environ.get("CONTIG") == "1":   # every packed matrix back to back in one allocation, in call order
    total = sum(p.numel() for L in layers for p, _, _ in L)
    buf = torch.empty(total, dtype=torch.uint8); off = 0; new = []
    for L in layers:
        row = []
        for p, O, K in L:
            v = buf[off:off + p.numel()].view(p.shape); v.copy_(p); off += p.numel(); row.append((v, O, K))
        new.append(row)
    layers = new
nbytes = sum(p.numel() for L in layers for p, _, _ in L)
xs = {K: torch.randn(T, K).bfloat16() for K in (576, 1536)}
ts = {n: [] for n in mods}
for r in range(int(sys.argv[3]) if len(sys.argv) > 3 else 15):
    for n, m in mods.items():
        t0 = time.perf_counter()
        for L in layers:
            for p, O, K in L: m.int4_linear(xs[K], p, None, O)
        ts[n].append(time.perf_counter() - t0)
print(f"T={T} {nbytes/1e6:.1f} MB: " + "  ".join(f"{n} {statistics.median(t)*1e3:.2f} ms ({nbytes/statistics.median(t)/1e9:.1f} GB/s, min {min(t)*1e3:.2f})" for n, t in ts.items()))
