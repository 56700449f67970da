import os, time, statistics
import triforce.runtime
import torch
from triforce.runtime.native import quant_cpu, layer_cpu
from triforce.runtime.quant import Int4Linear
from triforce.runtime.ops import PackedLinear
q=quant_cpu(); L=layer_cpu()
for th in (1,2):
    torch.set_num_threads(th)
    for o,k in ((16,64),(32,576)):
        m4=Int4Linear(torch.nn.Linear(k,o,bias=False,dtype=torch.bfloat16)); mb=PackedLinear(torch.nn.Linear(k,o,bias=False,dtype=torch.bfloat16))
        x=torch.randn(1,k,dtype=torch.bfloat16)
        for name,f in (("int4",lambda: q.int4_linear(x,m4.packed,None,o,None)),("bf16",lambda: L.linear_packed(x,mb.packed,None,o))):
            for _ in range(100): f()
            ts=[]
            for _ in range(9):
                t=time.perf_counter()
                for _ in range(1000): f()
                ts.append((time.perf_counter()-t)/1000)
            print(f"threads {th} {name} {o}x{k}: {statistics.median(ts)*1e6:.2f} us/call")
