# Round 34, Zen 3: linear_packed (AVX2 path) against torch, bf16 and fp32, N = 1..256 rows.
# Run: .venv/bin/python docs/bench/speed-zen3-r34/linear_packed.py
import time, torch, torch.nn.functional as F
from triforce.runtime import ops, native
torch.set_num_threads(2)
k = native.layer_cpu()
def t(fn, n=20):
    fn(); t0=time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter()-t0)/n*1e3
for O, K in ((1536, 576), (576, 1536), (49152, 576)):
    w = torch.randn(O, K).bfloat16(); p = ops.pack(w); w32 = w.float(); p32 = ops.pack(w32)
    for N in (1, 2, 4, 8, 16, 256):
        x = torch.randn(N, K).bfloat16(); n = 3 if N > 16 or O > 10000 else 20
        a = t(lambda: F.linear(x, w), n) if N <= 16 else float('nan'); b = t(lambda: k.linear_packed(x, p, None, O), n)
        c = t(lambda: F.linear(x.float(), w32), n); d = t(lambda: k.linear_packed(x.float(), p32, None, O), n)
        print(f"{O}x{K} N={N}: torch bf16 {a:.3f}  packed bf16 {b:.3f} ms ({O*K*2/b/1e6:.1f} GB/s, {2*N*O*K/b/1e6:.0f} GFLOP/s) | torch fp32 {c:.3f}  packed fp32 {d:.3f}")
