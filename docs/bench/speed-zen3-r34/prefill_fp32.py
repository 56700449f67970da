# Round 34, Zen 3: bf16 linears multiplied in bf16 vs through fp32, by row count; SDPA in bf16 vs fp32 (prefill shapes).
# Run: .venv/bin/python docs/bench/speed-zen3-r34/prefill_fp32.py
import time, torch, torch.nn.functional as F
torch.set_num_threads(2)
def t(fn, n=10):
    fn(); t0=time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter()-t0)/n*1e3
print(torch.backends.cpu.get_cpu_capability(), torch.ops.mkldnn._is_mkldnn_bf16_supported())
w=torch.randn(1536,576,dtype=torch.bfloat16)
for N in (1,2,4,8,16,1024):
    x=torch.randn(N,576,dtype=torch.bfloat16)
    a=t(lambda: F.linear(x,w), 3 if N>16 else 20); b=t(lambda: F.linear(x.float(),w.float()).bfloat16(), 20)
    print(f"N={N}: bf16 {a:.3f} ms, via fp32 {b:.3f} ms")
sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
for dt in (torch.bfloat16, torch.float32):
    q=torch.randn(1,9,512,64,dtype=dt); k=torch.randn(1,9,512,64,dtype=dt)
    print(dt, "causal square T=512", f"{t(lambda: sdpa(q,k,k,0.0,True),3):.2f} ms")
    qg=torch.randn(1,3,3*512,64,dtype=dt); kp=torch.randn(1,3,4096,64,dtype=dt)
    print(dt, "prefix 512 q x 4096 k", f"{t(lambda: sdpa(qg,kp,kp,0.0,False),3):.2f} ms")
