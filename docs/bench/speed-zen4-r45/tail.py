import os, time, statistics
import triforce.runtime
import torch
from triforce.runtime.native import attention_cpu
A=attention_cpu(); torch.set_num_threads(2)
dt=torch.bfloat16
L=30; cap=1200
sets=[[(torch.randn(1,3,cap,64,dtype=dt),torch.randn(1,3,cap,64,dtype=dt)) for _ in range(L)] for _ in range(4)]  # 4 x 30 x 1.8MB = 221 MB
for T in (1,2):
    q=torch.randn(1,9,T,64,dtype=dt); out=torch.empty(1,T,9,64,dtype=dt)
    res={S:[] for S in (1024,1025,1040,1100,1023)}
    for r in range(12):
        for S in res:
            kv=sets[(r*len(res)+list(res).index(S))%4]
            t=time.perf_counter()
            for k,v in kv: A.attend(q,k[:,:,:S],v[:,:,:S],0.125,None,out)
            res[S].append(time.perf_counter()-t)
    print(f"T={T}: " + "  ".join(f"S={S} {statistics.median(v)*1e3:.3f} ms" for S,v in res.items()))
