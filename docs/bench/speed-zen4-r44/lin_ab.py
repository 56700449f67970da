"""The target's packed bf16 linears at N rows, 2 threads: this build against variant sources (argv), interleaved, with a sum of the same bytes."""
import sys, os, time, statistics
import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.bench.kernels import SMOLLM2_PASS, build_beside
from triforce.runtime.native import layer_cpu
from triforce.runtime.ops import PackedLinear
torch.set_num_threads(int(os.environ.get("TH","2")))
mods={"cur": layer_cpu()}
for path in sys.argv[1:]:
    name=os.path.basename(path)[:-4]
    mods[name]=build_beside(path, f"lab_{name}")
DT = getattr(torch, os.environ.get("DT","bfloat16"))
shapes = SMOLLM2_PASS if os.environ.get("HEAD") else SMOLLM2_PASS[:-1]   # the head last
mats = [PackedLinear(torch.nn.Linear(k,o,bias=False,dtype=DT)) for o,k in shapes]
nb = sum(m.packed.numel()*m.packed.element_size() for m in mats); flat = torch.ones(nb//4)
Ns=[int(n) for n in os.environ.get("NS","1 3 4").split()]
res={(name,n):[] for name in mods for n in Ns}; sums=[]
for r in range(int(os.environ.get("R","15"))):
    for n in Ns:
        xs = {k: torch.randn(n,k,dtype=DT) for k in (576,1536)}
        for name,mod in mods.items():
            t=time.perf_counter()
            for (o,k),m in zip(shapes,mats): mod.linear_packed(xs[k], m.packed, None, o)
            res[(name,n)].append(time.perf_counter()-t)
    t=time.perf_counter(); flat.sum(); sums.append(time.perf_counter()-t)
s=statistics.median(sums); print(f"{nb/1e6:.0f} MB, sum {s*1e3:.2f} ms ({nb/s/1e9:.1f} GB/s)")
for n in Ns:
    print(f"N={n}: " + "  ".join(f"{name} {statistics.median(res[(name,n)])*1e3:.2f} ms (x sum {statistics.median(res[(name,n)])/s:.2f})" for name in mods))
