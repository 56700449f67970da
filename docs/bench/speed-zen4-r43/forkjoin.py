"""One linear_packed call per shape, hot (same matrix 200 times), 1 and 2 threads: what a call costs beside its bytes."""
import time, statistics, torch, torch.nn as nn
from triforce.runtime.ops import PackedLinear
from triforce.runtime.native import layer_cpu
kern=layer_cpu()
for th in (1,2):
    torch.set_num_threads(th)
    for o,k in ((1024,64),(576,576),(960,576),(3072,576),(576,1536)):
        m=PackedLinear(nn.Linear(k,o,bias=False,dtype=torch.bfloat16)); x=torch.randn(1,k,dtype=torch.bfloat16)
        out=torch.empty(1,o,dtype=torch.bfloat16)
        for _ in range(200): kern.linear_packed(x,m.packed,None,o)
        ts=[]
        for _ in range(30):
            t=time.perf_counter()
            for _ in range(200): kern.linear_packed(x,m.packed,None,o)
            ts.append((time.perf_counter()-t)/200)
        print(f"threads={th} {o}x{k} ({m.packed.numel()*2/1e6:.2f} MB, hot in L2/L3): {statistics.median(ts)*1e6:.2f} us per call")
