"""kernel.attend at T=1..4 over short S (a retrieval cache's) vs long: ms per layer and GB/s."""
import itertools, statistics, sys, time
import torch
from triforce.runtime.native import attention_cpu
torch.set_num_threads(2)
k = attention_cpu()
B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 30
for S in (1088, 2048, 4096, 8192, 32768):
    nbytes = 2 * B * Hkv * S * D * 2
    bufs = [(torch.randn(B, Hkv, S + 64, D, dtype=dt), torch.randn(B, Hkv, S + 64, D, dtype=dt)) for _ in range(max(2, (300 << 20) // nbytes))]
    for T in (1, 4):
        q = torch.randn(B, H, T, D, dtype=dt)
        rot = itertools.cycle(bufs)
        ts = []
        for _ in range(reps * 10):
            kc, vc = next(rot)
            t0 = time.perf_counter(); k.attend(q, kc[:, :, :S], vc[:, :, :S], D ** -0.5); ts.append(time.perf_counter() - t0)
        m = statistics.median(ts)
        print(f"S={S:>6} T={T}: {m*1e6:8.1f} us (min {min(ts)*1e6:7.1f})  {nbytes/m/1e9:5.1f} GB/s  x30 layers {30*m*1e3:6.2f} ms", flush=True)
