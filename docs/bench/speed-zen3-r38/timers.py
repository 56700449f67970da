# Round 38: per-phase rdtsc timers in run_item_avx2 (timers.patch applied to 1de20f2 attention_cpu.cpp as /tmp/r38/var/tim.cpp, built with attention_variants.py build tim)
# usage: LAYERS=30 python timers.py 8192:1,8192:3
import sys, glob, importlib.util, torch, time
sys.path.insert(0, "/tmp/r38")
so = glob.glob("/tmp/r38/var/b_tim/tim*.so")[0]
spec = importlib.util.spec_from_file_location("tim", so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.set_num_threads(2)
for S, T in [(int(a.split(":")[0]), int(a.split(":")[1])) for a in sys.argv[1].split(",")]:
    q = torch.randn(1, 9, T, 64).bfloat16(); NL = int(__import__("os").environ.get("LAYERS", "30")); K = torch.randn(NL, 1, 3, S, 64).bfloat16(); V = torch.randn(NL, 1, 3, S, 64).bfloat16()
    for L in range(30): m.attend(q, K[L % NL], V[L % NL], 0.125)
    m.timers(True); t0 = time.perf_counter()
    for r in range(5):
        for L in range(30): m.attend(q, K[L % NL], V[L % NL], 0.125)
    dt = (time.perf_counter() - t0) / 150
    t = m.timers(True); tot = sum(t[:3])
    print(f"S={S} T={T} {dt*1e3:.3f} ms/call  items {t[3]//150}  cycles/key/head: scores {t[0]/150/S/3:.1f} mask+softmax {t[1]/150/S/3:.1f} pv {t[2]/150/S/3:.1f}  (tsc)", flush=True)
