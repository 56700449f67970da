import os, sys, time, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "speed-xeon-r22", "spread"))
from load import load
torch.set_num_threads(2)
m = load(sys.argv[1], "prof")
S = int(sys.argv[2]); T = int(sys.argv[3]); secs = float(sys.argv[4])
dt = torch.bfloat16; L = 30; cap = S + 64
ks = [torch.randn(1, 3, cap, 64).to(dt) for _ in range(L)]
vs = [torch.randn(1, 3, cap, 64).to(dt) for _ in range(L)]
q = torch.randn(1, 9, T, 64).to(dt)
print("ready", flush=True)
ts = []
end = time.time() + secs
while time.time() < end:
    t0 = time.perf_counter()
    for i in range(L):
        m.attend(q, ks[i][:, :, :S], vs[i][:, :, :S], 0.125)
    ts.append(time.perf_counter() - t0)
ts.sort(); print(f"{len(ts)} min {ts[0]*1e3:.2f} med {ts[len(ts)//2]*1e3:.2f}", flush=True)
