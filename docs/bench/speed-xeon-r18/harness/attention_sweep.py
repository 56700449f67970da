import sys, time, statistics, torch
from torch.utils import cpp_extension
torch.set_num_threads(2); torch.inference_mode().__enter__()
def spec(s):   # "128" or "128:P"
    parts = s.split(":")
    return cpp_extension.load(name="a_" + s.replace(":", "_"), sources=["/tmp/r18/a/var.cpp"],
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-DPFK={parts[0]}"] + ([f"-D{p}" for p in parts[1:]]), extra_ldflags=["-fopenmp"])
variants = {s: spec(s) for s in sys.argv[1].split(",")}
print("built", flush=True)
flush = torch.ones(768 * 2**20 // 4)
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
for S in [int(x) for x in sys.argv[2].split(",")]:
    L = 30; cap = S + 256
    k = torch.randn(L, 1, 3, cap, 64).to(torch.bfloat16); v = torch.randn_like(k)
    nbytes = L * 2 * 3 * S * 64 * 2
    for T in (1, 4):
        q = torch.randn(1, 9, T, 64).to(torch.bfloat16)
        res = {s: [] for s in variants}
        for r in range(int(sys.argv[3])):
            for s, mod in variants.items():
                flush.sum(); res[s].append(tm(lambda: [mod.attend(q, k[l, :, :, :S], v[l, :, :, :S], 0.125) for l in range(L)]))
        print(f"S={S} T={T} " + "  ".join(f"{s} {statistics.median(x):.2f} ms ({nbytes/statistics.median(x)/1e6:.1f} GB/s)" for s, x in res.items()), flush=True)
