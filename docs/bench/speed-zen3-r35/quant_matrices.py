# Round 35: three SmolLM2 matrices (head, gate/up, down) as native Int8Linear / Int4Linear, 1 and 2 threads, N = 1 and 8.
# Run: .venv/bin/python docs/bench/speed-zen3-r35/quant_matrices.py
import time, statistics, torch, torch.nn as nn
from triforce.runtime.quant import Int4Linear, Int8Linear
torch.manual_seed(0)
for cls in (Int8Linear, Int4Linear):
    for (o, k) in ((49152, 576), (3072, 576), (576, 1536)):
        m = cls(nn.Linear(k, o, bias=False, dtype=torch.bfloat16), native=True)
        nbytes = sum(t.numel() * t.element_size() for t in m.buffers())
        for th in (1, 2):
            torch.set_num_threads(th)
            for n in (1, 8):
                x = torch.randn(n, k, dtype=torch.bfloat16)
                with torch.inference_mode():
                    for _ in range(3): m(x)
                    ts = []
                    for _ in range(20):
                        t0 = time.perf_counter(); m(x); ts.append(time.perf_counter() - t0)
                t = statistics.median(ts)
                print(f"{cls.__name__} {o}x{k} threads={th} N={n}: {t*1e3:.3f} ms {nbytes/t/1e9:.1f} GB/s {2*n*o*k/t/1e9:.1f} GOP/s")
