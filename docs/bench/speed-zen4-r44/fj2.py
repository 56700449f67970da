"""Fork/join of one small packed linear, 2 threads: argv[1] tri = import triforce.runtime first; argv[2] threads (after set_num_threads(1))."""
import sys, time, statistics
if sys.argv[1] == "tri": import triforce.runtime
import torch, torch.nn as nn
from triforce.runtime.ops import PackedLinear
from triforce.runtime.native import layer_cpu
kern=layer_cpu()
torch.set_num_threads(1); torch.set_num_threads(int(sys.argv[2]))
for o,k in ((1024,64),(576,576)):
    m=PackedLinear(nn.Linear(k,o,bias=False,dtype=torch.bfloat16)); x=torch.randn(1,k,dtype=torch.bfloat16)
    for _ in range(200): kern.linear_packed(x,m.packed,None,o)
    ts=[]
    for _ in range(30):
        t=time.perf_counter()
        for _ in range(200): kern.linear_packed(x,m.packed,None,o)
        ts.append((time.perf_counter()-t)/200)
    print(f"{sys.argv[1:]} {o}x{k}: {statistics.median(ts)*1e6:.2f} us", end="; ")
print()
