import sys, time, statistics, torch, torch.nn as nn
from torch.utils import cpp_extension
from triforce.runtime.ops import PackedLinear
torch.set_num_threads(2); torch.inference_mode().__enter__()
def spec(s):
    pmr, h = s.split(":")
    return cpp_extension.load(name="l_" + s.replace(":", "_"), sources=["/tmp/r18/l/var.cpp"],
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-DPMR={pmr}", f"-DPFH=_MM_HINT_{h}"], extra_ldflags=["-fopenmp"])
variants = {s: spec(s) for s in sys.argv[1].split(",")}
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
calls = [(PackedLinear(nn.Linear(k, o, bias=False).to(torch.bfloat16)).packed, o, k) for _ in range(30) for o, k in shapes]
calls.append((PackedLinear(nn.Linear(576, 49152, bias=False).to(torch.bfloat16)).packed, 49152, 576))
nbytes = sum(p.numel() * 2 for p, o, k in calls)
flush = torch.ones(768 * 2**20 // 4)
xs = {k: torch.randn(16, k, dtype=torch.bfloat16) for k in (576, 1536)}
def run(mod, T):
    for p, o, k in calls: mod.linear_packed(xs[k][:T], p, None, o)
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
for T in [int(t) for t in sys.argv[2].split(",")]:
    res = {s: [] for s in variants}
    for r in range(int(sys.argv[3])):
        for s, mod in variants.items():
            flush.sum(); res[s].append(tm(lambda: run(mod, T)))
    print(f"T={T} " + "  ".join(f"{s} {statistics.median(v):.2f} ms ({nbytes/statistics.median(v)/1e6:.1f} GB/s)" for s, v in res.items()), flush=True)
