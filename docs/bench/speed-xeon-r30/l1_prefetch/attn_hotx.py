"""kernel.attend hot in cache, XP_MODE parts switched off, interleaved."""
import os, statistics, sys, time
import torch
from triforce.runtime.native import attention_cpu
torch.set_num_threads(2)
k = attention_cpu()
B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
reps, modes = int(sys.argv[1]), sys.argv[2].split()
S = int(sys.argv[3])
kc, vc = torch.randn(B, Hkv, S + 64, D, dtype=dt), torch.randn(B, Hkv, S + 64, D, dtype=dt)
for T in (1, 4, 6, 8):
    q = torch.randn(B, H, T, D, dtype=dt)
    ts = {m: [] for m in modes}
    for _ in range(reps):
        for m in modes:
            os.environ["XP_MODE"] = m
            t0 = time.perf_counter(); k.attend(q, kc[:, :, :S], vc[:, :, :S], D ** -0.5); ts[m].append(time.perf_counter() - t0)
    blocks = Hkv * S / 64 / 2
    print(f"S={S} T={T}: " + "  ".join(f"{m}: {statistics.median(ts[m])*1e6:6.1f} us ({statistics.median(ts[m])*2.3e9/blocks:5.0f} cyc/blk)" for m in modes), flush=True)
