import sys, time, statistics, torch, torch.nn as nn
sys.path.insert(0, "/tmp/r18/v")
from build import build
from triforce.runtime.quant import Int4Linear
torch.set_num_threads(2); torch.inference_mode().__enter__()
from build import spec
variants = {s: spec(s) for s in sys.argv[1].split(",")}
flush = torch.ones(768 * 2**20 // 4)
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
for O, K, reps in [(49152 * 2, 576, 1), (3072, 576, 32), (960, 576, 100)]:
    ms = [Int4Linear(nn.Linear(K, O, bias=False).to(torch.bfloat16)).packed for _ in range(reps)]
    nbytes = sum(p.numel() for p in ms); x = torch.randn(1, K, dtype=torch.bfloat16)
    fl = torch.ones(nbytes // 4)
    res = {s: [] for s in variants}; rd = []
    for r in range(7):
        for s, mod in variants.items():
            flush.sum(); res[s].append(tm(lambda: [mod.int4_linear(x, p, None, O) for p in ms]))
        flush.sum(); rd.append(tm(lambda: fl.sum()))
    m = statistics.median
    print(f"{reps} x {O}x{K} ({nbytes/1e6:.1f} MB): plain read {nbytes/m(rd)/1e6:.1f} GB/s; " + ", ".join(f"{s} {nbytes/m(v)/1e6:.1f}" for s, v in res.items()), flush=True)
