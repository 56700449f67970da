import sys, time, statistics, torch, torch.nn as nn
sys.path.insert(0, "/tmp/r18/v")
from build import build
from triforce.runtime.quant import Int4Linear, Int8Linear
torch.set_num_threads(2)
from build import spec
variants = {s: spec(s) for s in sys.argv[1].split(",")}
print("built", list(variants), flush=True)
torch.inference_mode().__enter__()
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
layers = [[Int4Linear(nn.Linear(k, o, bias=False).to(torch.bfloat16)) for o, k in shapes] for _ in range(30)]
calls = [(m.packed, o, k) for l in layers for m, (o, k) in zip(l, shapes)]
head = Int8Linear(nn.Linear(576, 49152, bias=False).to(torch.bfloat16))
nbytes = sum(p.numel() for p, o, k in calls) + head.packed.numel()
flush = torch.ones(768 * 2**20 // 4)
xs = {k: torch.randn(8, k, dtype=torch.bfloat16) for k in (576, 1536)}
def run(mod, T):
    for p, o, k in calls: mod.int4_linear(xs[k][:T], p, None, o)
    mod.int8_linear(xs[576][:T], head.packed, head.scales, None, 49152)
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
for T in [int(t) for t in sys.argv[2].split(",")]:
    res = {s: ([], []) for s in variants}
    for rep in range(int(sys.argv[3])):
        for s, mod in variants.items():
            flush.sum(); res[s][0].append(tm(lambda: run(mod, T))); run(mod, T); res[s][1].append(tm(lambda: run(mod, T)))
    for s, (c, w) in res.items():
        print(f"T={T} {s:8s} cold {statistics.median(c):.2f} ms ({nbytes/statistics.median(c)/1e6:.1f} GB/s)  warm {statistics.median(w):.2f}", flush=True)
