"""ns per key and KV head, 1 thread, K/V small enough for L2 (S keys, 3 KV heads, G = 3), per T."""
import sys, time, os
import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.native import attention_cpu
torch.set_num_threads(int(os.environ.get("TH","1")))
mod = attention_cpu()
for S in [int(s) for s in sys.argv[1].split(",")]:
    k = torch.randn(1,3,S,64).bfloat16(); v = torch.randn(1,3,S,64).bfloat16()
    out=[]
    for T in [1,2,3,4,8]:
        q = torch.randn(1,9,T,64).bfloat16()
        for _ in range(50): mod.attend(q,k,v,0.125)
        best=1e9
        for r in range(7):
            n=400; t=time.perf_counter()
            for _ in range(n): mod.attend(q,k,v,0.125)
            best=min(best,(time.perf_counter()-t)/n)
        out.append(f"T={T} {best*1e9/(3*S):.2f}")
    print(f"S={S}: "+"  ".join(out), flush=True)
