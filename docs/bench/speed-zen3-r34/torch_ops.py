# Round 34, Zen 3: torch's own CPU ops on this CPU (bf16 vs fp32 GEMM, linears, SDPA) and the scalar native attention of the build
# at the session's start. Run: .venv/bin/python docs/bench/speed-zen3-r34/torch_ops.py
import time, torch, torch.nn.functional as F
torch.set_num_threads(2)
def t(fn, n=20):
    fn(); t0=time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter()-t0)/n*1e3
for dt in (torch.bfloat16, torch.float32):
    a=torch.randn(512,576,dtype=dt); b=torch.randn(576,1536,dtype=dt)
    ms=t(lambda: a@b, 5); print(dt, "matmul 512x576x1536", f"{ms:.2f} ms", f"{2*512*576*1536/ms/1e6:.1f} GFLOP/s")
    x=torch.randn(1,576,dtype=dt); w=torch.randn(1536,576,dtype=dt)
    ms=t(lambda: F.linear(x,w)); print(dt, "linear 1 row 1536x576", f"{ms:.3f} ms", f"{w.numel()*w.element_size()/ms/1e6:.1f} GB/s")
    x=torch.randn(8,576,dtype=dt)
    ms=t(lambda: F.linear(x,w)); print(dt, "linear 8 rows", f"{ms:.3f} ms")
    for T in (1,8):
        q=torch.randn(1,3,3*T,64,dtype=dt); k=torch.randn(1,3,8192,64,dtype=dt); v=torch.randn(1,3,8192,64,dtype=dt)
        ms=t(lambda: F.scaled_dot_product_attention(q,k,v),10); print(dt, f"sdpa T={T} S=8K (one layer)", f"{ms:.3f} ms", f"{2*k.numel()*k.element_size()/ms/1e6:.1f} GB/s")
from triforce.runtime import native
k_=native.attention_cpu()
print("native attention module", k_, k_.has_avx512_bf16() if k_ else None)
for dt in (torch.bfloat16, torch.float32):
  for T in (1,8):
    q=torch.randn(1,9,T,64,dtype=dt); k=torch.randn(1,3,8192,64,dtype=dt); v=torch.randn(1,3,8192,64,dtype=dt)
    ms=t(lambda: k_.attend(q,k,v,0.125),5); print(dt, f"native attend T={T} S=8K", f"{ms:.3f} ms")
