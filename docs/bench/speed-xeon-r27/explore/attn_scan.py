import os, sys, time, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "speed-xeon-r22", "spread"))
from load import load
torch.set_num_threads(2)
m = load(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "runtime", "csrc"), "r27")
dt = torch.bfloat16; L = 30
def run(S, T, reps):
    cap = S + 64
    ks = [torch.randn(1, 3, cap, 64).to(dt) for _ in range(L)]
    vs = [torch.randn(1, 3, cap, 64).to(dt) for _ in range(L)]
    q = torch.randn(1, 9, T, 64).to(dt)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for i in range(L):
            m.attend(q, ks[i][:, :, :S], vs[i][:, :, :S], 0.125)
        ts.append(time.perf_counter() - t0)
    ts.sort(); return ts[0]*1e3, ts[len(ts)//2]*1e3
for S, reps, scale in [(32000, 9, 1), (4000, 40, 8), (32000, 9, 1)]:
    for T in (1, 2, 4, 5, 6, 8):
        mn, md = run(S, T, reps)
        print(f"S={S} T={T} min {mn:.2f} med {md:.2f}  x{scale}: {mn*scale:.1f}", flush=True)
