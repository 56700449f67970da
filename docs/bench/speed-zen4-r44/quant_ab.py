"""The middle level's int4 linears (30 layers x qkv, o, gate_up, down) + its int8 head at N rows, 2 threads:
this build's quant_cpu against variant sources (argv), interleaved, with a sum of the same bytes."""
import sys, os, time, statistics
import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.bench.kernels import SMOLLM2_PASS, build_beside
from triforce.runtime.native import quant_cpu
from triforce.runtime.quant import Int4Linear, Int8Linear
torch.set_num_threads(int(os.environ.get("TH","2")))
mods={"cur": quant_cpu()}
for path in sys.argv[1:]:
    name=os.path.basename(path)[:-4]
    mods[name]=build_beside(path, f"qab_{name}")
shapes = SMOLLM2_PASS[:-1]   # the head: int8, below
mats = [Int4Linear(torch.nn.Linear(k,o,bias=False,dtype=torch.bfloat16)) for o,k in shapes]
head = Int8Linear(torch.nn.Linear(576,49152,bias=False,dtype=torch.bfloat16))
nb = sum(m.packed.numel() for m in mats) + head.packed.numel(); flat = torch.ones(nb//4)
Ns=[int(n) for n in os.environ.get("NS","1 2 3").split()]
res={(name,n):[] for name in mods for n in Ns}; sums=[]
for r in range(int(os.environ.get("R","15"))):
    for n in Ns:
        xs = {k: torch.randn(n,k,dtype=torch.bfloat16) for k in (576,1536)}
        for name,mod in mods.items():
            t=time.perf_counter()
            for (o,k),m in zip(shapes,mats): mod.int4_linear(xs[k], m.packed, None, o, None)
            mod.int8_linear(xs[576], head.packed, head._buffers["scales"] if "scales" in head._buffers else head.scales, None, 49152, None)
            res[(name,n)].append(time.perf_counter()-t)
    t=time.perf_counter(); flat.sum(); sums.append(time.perf_counter()-t)
s=statistics.median(sums); print(f"{nb/1e6:.0f} MB, sum {s*1e3:.2f} ms ({nb/s/1e9:.1f} GB/s)")
for n in Ns:
    print(f"N={n}: " + "  ".join(f"{name} {statistics.median(res[(name,n)])*1e3:.2f} ms (x sum {statistics.median(res[(name,n)])/s:.2f})" for name in mods))
