"""30 layers of attention (T = 1..4) against torch's sum of the same K and V, interleaved (env S, TH): the
kernel's time over a plain read's, whatever the host's bandwidth is that minute."""
import sys, os, time, statistics, torch
from triforce.runtime.native import attention_cpu
th=int(os.environ.get("TH","2")); torch.set_num_threads(th)
m=attention_cpu()
S=int(os.environ.get("S","32000"))
layers=[(torch.randn(1,3,S,64).bfloat16(), torch.randn(1,3,S,64).bfloat16()) for _ in range(30)]
nb=30*2*3*S*64*2
for rep in range(3):
  for T in (1,2,3,4):
    q=torch.randn(1,9,T,64).bfloat16()
    ta,ts=[],[]
    for r in range(5):
        t=time.perf_counter()
        for k,v in layers: m.attend(q,k,v,0.125)
        ta.append(time.perf_counter()-t)
        t=time.perf_counter()
        for k,v in layers: k.sum(); v.sum()
        ts.append(time.perf_counter()-t)
    a,s=statistics.median(ta),statistics.median(ts)
    print(f"S={S} T={T} th={th}: attention {a*1e3:.2f} ms ({nb/a/1e9:.0f} GB/s), sum of K,V {s*1e3:.2f} ms ({nb/s/1e9:.0f} GB/s), ratio {a/s:.2f}", flush=True)
