"""A loop of attention calls for perf record (T = argv[1]; `cold` = 32K keys rotated, else 2,048 hot; env TH threads)."""
import sys, time, torch
from triforce.runtime.native import attention_cpu
import os; torch.set_num_threads(int(os.environ.get("TH","1")))
k_ = attention_cpu()
B,H,Hkv,D,dt = 1,9,3,64,torch.bfloat16
T=int(sys.argv[1]); cold = len(sys.argv) > 2
q = torch.randn(B,H,T,D,dtype=dt)
S = 32768 if cold else 2048
bufs=[(torch.randn(B,Hkv,S,D,dtype=dt),torch.randn(B,Hkv,S,D,dtype=dt)) for _ in range(12 if cold else 1)]
t=time.time(); i=0
while time.time()-t < 8:
    kc,vc=bufs[i%len(bufs)]; i+=1
    k_.attend(q,kc,vc,D**-0.5)
