"""Per-op fixed cost: the middle's 120 int4 linears one by one against the same bytes in 4 big linears."""
import os, time, statistics
import triforce.runtime
import torch
from triforce.runtime.bench.kernels import SMOLLM2_PASS
from triforce.runtime.native import quant_cpu
from triforce.runtime.quant import Int4Linear
from triforce.runtime.ops import PackedLinear
torch.set_num_threads(int(os.environ.get("TH","2")))
q=quant_cpu()
shapes = SMOLLM2_PASS[:-1]
kind=os.environ.get("KIND","int4")
mk = (lambda o,k: Int4Linear(torch.nn.Linear(k,o,bias=False,dtype=torch.bfloat16))) if kind=="int4" else (lambda o,k: PackedLinear(torch.nn.Linear(k,o,bias=False,dtype=torch.bfloat16)))
mats = [mk(o,k) for o,k in shapes]
uniq = sorted(set(shapes))
big = {s: mk(s[0]*30, s[1]) for s in uniq}
from triforce.runtime.native import layer_cpu
L=layer_cpu()
def lin(x,m,o):
    if kind=="int4": q.int4_linear(x, m.packed, None, o, None)
    else: L.linear_packed(x, m.packed, None, o)
nb = sum(m.packed.numel()*m.packed.element_size() for m in mats); flat=torch.ones(nb//4)
N=int(os.environ.get("N","1"))
xs = {k: torch.randn(N,k,dtype=torch.bfloat16) for k in (576,1536)}
res={"small":[], "big":[], "sum":[]}
for r in range(int(os.environ.get("R","21"))):
    t=time.perf_counter()
    for (o,k),m in zip(shapes,mats): lin(xs[k], m, o)
    res["small"].append(time.perf_counter()-t)
    t=time.perf_counter()
    for (o,k),m in big.items(): lin(xs[k], m, o*30)
    res["big"].append(time.perf_counter()-t)
    t=time.perf_counter(); flat.sum(); res["sum"].append(time.perf_counter()-t)
m={k:statistics.median(v)*1e3 for k,v in res.items()}
print(f"{kind} N={N} {nb/1e6:.0f} MB: 120 ops {m['small']:.2f} ms, 4 big {m['big']:.2f} ms, sum {m['sum']:.2f} ms ({nb/m['sum']/1e6:.1f} GB/s); per-op extra {(m['small']-m['big'])/116*1e3:.1f} us")
