# torch's CPU flash kernel (the AVX2 prefill path, _attend_sdpa_split) on a prefill chunk: GFLOP/s
import sys, time, torch
from triforce.runtime import attention
torch.set_num_threads(2)
for dt in (torch.float32, torch.bfloat16):
    for S, T in [(4096, 1024), (16384, 1024), (32768, 1024)]:
        q = torch.randn(1, 9, T, 64, dtype=dt); k = torch.randn(1, 3, S, 64, dtype=dt); v = torch.randn(1, 3, S, 64, dtype=dt)
        attention._attend_sdpa_split(q, k, v)
        ts = []
        for _ in range(3):
            t0 = time.perf_counter(); attention._attend_sdpa_split(q, k, v); ts.append(time.perf_counter() - t0)
        t = min(ts)
        flops = 4 * 9 * T * 64 * (S - T + T / 2)
        print(f"{dt} S={S} T={T}: {t*1e3:.1f} ms, {flops/t/1e9:.0f} GFLOP/s", flush=True)
