# per-phase rdtsc timers of a timers-patched variant: V=NAME LAYERS=30 python timers2.py 8192:1,32768:1
import os, sys, glob, importlib.util, torch, time
name = os.environ.get("V", "tim")
so = glob.glob(f"/tmp/r39/var/b_{name}/{name}*.so")[0]
spec = importlib.util.spec_from_file_location(name, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.set_num_threads(2)
NL = int(os.environ.get("LAYERS", "30"))
for S, T in [(int(a.split(":")[0]), int(a.split(":")[1])) for a in sys.argv[1].split(",")]:
    q = torch.randn(1, 9, T, 64).bfloat16(); K = torch.randn(NL, 1, 3, S, 64).bfloat16(); Vv = torch.randn(NL, 1, 3, S, 64).bfloat16()
    for L in range(30): m.attend(q, K[L % NL], Vv[L % NL], 0.125)
    m.timers(True); t0 = time.perf_counter()
    for r in range(5):
        for L in range(30): m.attend(q, K[L % NL], Vv[L % NL], 0.125)
    dt = (time.perf_counter() - t0) / 150
    t = m.timers(True)
    print(f"{name} S={S} T={T} {dt*1e3:.3f} ms/call cycles/key/head: scores {t[0]/150/S/3:.1f} softmax {t[1]/150/S/3:.1f} pv {t[2]/150/S/3:.1f} (tsc)", flush=True)
