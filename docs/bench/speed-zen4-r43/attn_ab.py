"""A/B of attention builds: the current one and each source given (e.g. this directory's patches applied
to runtime/csrc/attention_cpu.cpp), interleaved over 30 layers of random bf16 K/V at S keys (env S, TS, R, TH)."""
import sys, os, time, statistics, torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC, attention_cpu
th=int(os.environ.get("TH","2")); torch.set_num_threads(th)
mods={"cur": attention_cpu()}
for path in sys.argv[1:]:
    name=os.path.basename(path)[:-4]
    d=f"/tmp/attn_ab/b_{name}"; os.makedirs(d,exist_ok=True)
    mods[name]=cpp_extension.load(name=f"ab_{name}", sources=[path], build_directory=d,
        extra_cflags=["-O3","-std=c++17","-fopenmp","-march=native",f"-I{CSRC}","-w"], extra_ldflags=["-fopenmp"])
S=int(os.environ.get("S","32000")); Ts=[int(t) for t in os.environ.get("TS","1 2 4").split()]
layers=[(torch.randn(1,3,S,64).bfloat16(), torch.randn(1,3,S,64).bfloat16()) for _ in range(30)]
for T in Ts:
    q=torch.randn(1,9,T,64).bfloat16()
    times={n:[] for n in mods}
    for r in range(int(os.environ.get("R","9"))):
        for n,m in mods.items():
            t=time.perf_counter()
            for k,v in layers: m.attend(q,k,v,0.125)
            times[n].append(time.perf_counter()-t)
    nb=30*2*3*S*64*2
    print(f"S={S} T={T} th={th}: " + "  ".join(f"{n} {statistics.median(ts)*1e3:.2f} ms ({nb/statistics.median(ts)/1e9:.0f} GB/s)" for n,ts in times.items()), flush=True)
