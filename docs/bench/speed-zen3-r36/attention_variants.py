# Round 36: attention_cpu.cpp variants built side by side under their own module names, then timed
# interleaved in one process; prints the largest output difference against the first.
#   variant sources: $VARDIR/NAME.cpp (VARDIR default /tmp/r36/var; base = 470a23a's attention_cpu.cpp,
#   rl7c = this round's),
#   built by: python attention_variants.py build NAME
#   timed by: [LAYERS=30] python attention_variants.py NAME1,NAME2 [threads] [S:T,S:T,...]
# LAYERS=1 (default) reuses one layer's K/V (mostly L3-resident; 15 rounds, attention_variants.txt);
# LAYERS=30 takes the K/V of 30 layers in turn, DRAM-resident as in a pass (5 rounds of 30 calls,
# attention_variants_30.txt).
import os, sys
VAR = os.environ.get("VARDIR", "/tmp/r36/var")
if sys.argv[1] == "build":
    from torch.utils.cpp_extension import load
    name = sys.argv[2]
    load(name=name, sources=[f"{VAR}/{name}.cpp"], extra_include_paths=["runtime/csrc"],
         extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", "-w"], extra_ldflags=["-fopenmp"],
         build_directory=f"{VAR}/b_{name}", verbose=False)
    sys.exit(0)
import glob, importlib.util, statistics, time, torch
mods = {}
for n in sys.argv[1].split(","):
    so = glob.glob(f"{VAR}/b_{n}/{n}*.so")[0]
    spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); mods[n] = m
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
torch.set_num_threads(threads)
layers = int(os.environ.get("LAYERS", "1"))
rounds = 15 if layers == 1 else 5
for S, T in [tuple(map(int, x.split(":"))) for x in (sys.argv[3] if len(sys.argv) > 3 else "8192:1,8192:4,8192:8,8192:16,32768:8").split(",")]:
    q = torch.randn(1, 9, T, 64).bfloat16()
    K = torch.randn(layers, 1, 3, S, 64).bfloat16(); V = torch.randn(layers, 1, 3, S, 64).bfloat16()
    outs = {n: m.attend(q, K[0], V[0], 0.125) for n, m in mods.items()}
    ref = next(iter(outs.values()))
    diff = max(float((o.float() - ref.float()).abs().max()) for o in outs.values())
    ts = {n: [] for n in mods}
    for _ in range(rounds):
        for n, m in mods.items():
            t0 = time.perf_counter()
            for L in range(layers): m.attend(q, K[L], V[L], 0.125)
            ts[n].append((time.perf_counter() - t0) / layers)
    print(f"S={S} T={T:>2} maxdiff={diff:.2e}: " + "  ".join(f"{n} {statistics.median(t)*1e3:.3f} ms ({4*9*T*S*64/statistics.median(t)/1e9:.0f} GF/s)" for n, t in ts.items()), flush=True)
