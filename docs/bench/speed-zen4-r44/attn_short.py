"""Attention over short caches (the middle level's: S keys, 3 KV heads, G = 3), 30 layers, 2 threads: cold (4 sets of 30 layers
rotated, beyond the L3) against hot (one layer's K/V 30 times), T = 1..3; variants (argv) interleaved."""
import sys, os, time, statistics
import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.bench.kernels import build_beside
from triforce.runtime.native import attention_cpu
torch.set_num_threads(int(os.environ.get("TH","2")))
mods={"cur": attention_cpu()}
for path in sys.argv[1:]:
    name=os.path.basename(path)[:-4]
    mods[name]=build_beside(path, f"ab_{name}")
S=int(os.environ.get("S","1024"))
sets=[[(torch.randn(1,3,S,64).bfloat16(), torch.randn(1,3,S,64).bfloat16()) for _ in range(30)] for _ in range(4)]
nb=30*2*3*S*64*2
for T in [int(t) for t in os.environ.get("TS","1 3").split()]:
    q=torch.randn(1,9,T,64).bfloat16()
    res={(n,c):[] for n in mods for c in ("cold","hot")}
    calls=0
    for r in range(int(os.environ.get("R","20"))):
        for n,m in mods.items():
            layers=sets[calls%4]; calls+=1   # each cold call on the set least recently read (4 sets: past the L3)
            t=time.perf_counter()
            for k,v in layers: m.attend(q,k,v,0.125)
            res[(n,"cold")].append(time.perf_counter()-t)
            k,v=layers[0]
            t=time.perf_counter()
            for _ in range(30): m.attend(q,k,v,0.125)
            res[(n,"hot")].append(time.perf_counter()-t)
    print(f"S={S} T={T}: "+"  ".join(f"{n} {c} {statistics.median(res[(n,c)])*1e3:.3f} ms ({nb/statistics.median(res[(n,c)])/1e9:.0f} GB/s)" for n in mods for c in ("cold","hot")), flush=True)
