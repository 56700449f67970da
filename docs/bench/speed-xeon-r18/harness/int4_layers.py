import time, statistics, torch, torch.nn as nn
from triforce.runtime.quant import Int4Linear, Int8Linear
torch.set_num_threads(2)
torch.inference_mode().__enter__()
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
layers = [[Int4Linear(nn.Linear(k, o, bias=False).to(torch.bfloat16)) for o, k in shapes] for _ in range(30)]
nbytes = sum(p.numel() * p.element_size() for l in layers for m in l for p in list(m.buffers()) + list(m.parameters()))
print("int4 bytes MB", nbytes / 1e6)
flush = torch.ones(768 * 2**20 // 4)
buf = torch.ones(int(nbytes) // 4)
xs = {k: torch.randn(8, k, dtype=torch.bfloat16) for k in (576, 1536)}
def run(T):
    for l in layers:
        for m, (o, k) in zip(l, shapes): m(xs[k][:T])
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
for T in (1, 4):
    c, w, rc, rw = [], [], [], []
    for rep in range(9):
        flush.sum(); c.append(tm(lambda: run(T))); run(T); run(T); w.append(tm(lambda: run(T)))
        flush.sum(); rc.append(tm(lambda: buf.sum())); buf.sum(); rw.append(tm(lambda: buf.sum()))
    m = statistics.median
    print(f"T={T} int4 layers cold {m(c):.2f} ms ({nbytes/m(c)/1e6:.1f} GB/s) warm {m(w):.2f} ({nbytes/m(w)/1e6:.1f}); plain read cold {m(rc):.2f} ({nbytes/m(rc)/1e6:.1f}) warm {m(rw):.2f}")
