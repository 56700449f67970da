import os, time, statistics, sys
import triforce.runtime
import torch
from triforce.runtime.native import attention_cpu
A=attention_cpu()
torch.set_num_threads(int(os.environ.get("TH","2")))
T=int(os.environ.get("T","3")); dt=torch.bfloat16
def mk(S,n): return [(torch.randn(1,3,S,64,dtype=dt),torch.randn(1,3,S,64,dtype=dt)) for _ in range(n)]
q=torch.randn(1,9,T,64,dtype=dt); out=torch.empty(1,T,9,64,dtype=dt)
th=torch.get_num_threads()
for S,n,label in ((1024,1,"L2 (1 layer, 1024 keys)"),(7000,1,"L3 (1 layer, 7000 keys, 5.4 MB)"),(7000,30,"DRAM (30 layers, 7000 keys)"),(2048,1,"L2/L3 2048"),(32000,8,"DRAM 32K x 8")):
    kv=mk(S,n)
    for i in range(n): A.attend(q,kv[i][0],kv[i][1],0.125,None,out)
    ts=[]
    for r in range(max(60, 3*n)):
        k,v=kv[r%n]
        t=time.perf_counter(); A.attend(q,k,v,0.125,None,out); ts.append(time.perf_counter()-t)
    m=statistics.median(ts)
    kh=S*3
    print(f"T={T} th={th} {label}: {m*1e6:.1f} us/call, {m/kh*th*1e9:.2f} ns per key-head per thread = {m/kh*th*3.66e9:.1f} cycles, {2*kh*128/m/1e9:.1f} GB/s")
