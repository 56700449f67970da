# one process: linear_packed on prefill-sized inputs; GFLOP/s
import os, sys, time, torch
from triforce.runtime import native
from triforce.runtime.ops import pack
torch.manual_seed(0)
k = native.layer_cpu()
shapes = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576), ("down", 576, 1536)]
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
tot_f, tot_t = 0, 0
for name, O, K in shapes:
    w = (torch.randn(O, K) * 0.05).bfloat16(); p = pack(w); x = torch.randn(N, K).bfloat16()
    for _ in range(3): k.linear_packed(x, p, None, O)
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); k.linear_packed(x, p, None, O); ts.append(time.perf_counter() - t)
    t = sorted(ts)[len(ts) // 2]; f = 2 * N * O * K
    tot_f += f; tot_t += t
    print(f"{name:8s} N={N} O={O} K={K}: {t*1e3:7.2f} ms  {f/t/1e9:7.1f} GFLOP/s")
print(f"all: {tot_t*1e3:.2f} ms {tot_f/tot_t/1e9:.1f} GFLOP/s")
