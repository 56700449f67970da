# interleaved per-phase timers: VS=tim_base,tim_dl LAYERS=30 python timers2.py 32768:1,32768:3
import os, sys, glob, importlib.util, torch, time, statistics
mods = {}
for name in os.environ["VS"].split(","):
    so = glob.glob(f"{os.environ.get('VARDIR', '/tmp/r41/var')}/b_{name}/{name}*.so")[0]
    spec = importlib.util.spec_from_file_location(name, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); mods[name] = m
torch.set_num_threads(2)
NL = int(os.environ.get("LAYERS", "30")); ROUNDS = int(os.environ.get("ROUNDS", "5"))
for S, T in [(int(a.split(":")[0]), int(a.split(":")[1])) for a in sys.argv[1].split(",")]:
    q = torch.randn(1, 9, T, 64).bfloat16(); K = torch.randn(NL, 1, 3, S, 64).bfloat16(); Vv = torch.randn(NL, 1, 3, S, 64).bfloat16()
    res = {n: [] for n in mods}
    for r in range(ROUNDS):
        for n, m in mods.items():
            for L in range(NL): m.attend(q, K[L], Vv[L], 0.125)
            m.timers(True); t0 = time.perf_counter()
            for L in range(NL): m.attend(q, K[L], Vv[L], 0.125)
            dt = (time.perf_counter() - t0) / NL
            t = m.timers(True)
            res[n].append((dt * 1e3, t[0] / NL / S / 3, t[1] / NL / S / 3, t[2] / NL / S / 3))
    for n, rs in res.items():
        med = [statistics.median(x[i] for x in rs) for i in range(4)]
        print(f"S={S} T={T} {n:10s} {med[0]:.3f} ms  scores {med[1]:.1f} softmax {med[2]:.1f} pv {med[3]:.1f}", flush=True)
