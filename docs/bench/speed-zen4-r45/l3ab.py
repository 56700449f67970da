import os, time, statistics, sys
import triforce.runtime
import torch
from triforce.runtime.native import attention_cpu
from triforce.runtime.bench.kernels import build_beside
mods={"cur":attention_cpu()}
for p in sys.argv[1:]:
    mods[os.path.basename(os.path.dirname(p))]=build_beside(p, "a_"+os.path.basename(os.path.dirname(p)))
torch.set_num_threads(int(os.environ.get("TH","2")))
dt=torch.bfloat16; th=torch.get_num_threads()
def mk(S,n): return [(torch.randn(1,3,S,64,dtype=dt),torch.randn(1,3,S,64,dtype=dt)) for _ in range(n)]
for T in [int(t) for t in os.environ.get("TS","1 3").split()]:
  q=torch.randn(1,9,T,64,dtype=dt); out=torch.empty(1,T,9,64,dtype=dt)
  for S,n,label in ((7000,1,"L3 7000"),(7000,30,"DRAM 7000x30"),(32000,8,"DRAM 32K x8")):
    kv=mk(S,n); res={k:[] for k in mods}
    for r in range(int(os.environ.get("R","5"))):
      for name,A in mods.items():
        for i in range(n): A.attend(q,kv[i][0],kv[i][1],0.125,None,out)  # warm L3 for the 1-set case
        t=time.perf_counter()
        for rep in range(max(1,30//n)):
          for i in range(n): A.attend(q,kv[i][0],kv[i][1],0.125,None,out)
        res[name].append((time.perf_counter()-t)/(max(1,30//n)*n))
    kh=S*3
    print(f"T={T} {label}: " + "  ".join(f"{k} {statistics.median(v)/kh*th*3.66e9:.1f} cyc/key-head" for k,v in res.items()), flush=True)
