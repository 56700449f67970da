"""The head alone, cold from DRAM (6 copies in turn): int8, int4, int4 + torch.topk, int4 + a torch rescoring
(round 47, before the native rescore_top), and torch.topk alone. python head_cost.py"""
import time, torch, statistics
import triforce.runtime
from triforce.runtime.quant import Int8Linear, Int4Linear
from triforce.runtime.ops import Linear
torch.set_num_threads(2)
V, E = 49152, 576
heads = []
for i in range(6):   # distinct copies so every call reads from DRAM
    lin = torch.nn.Linear(E, V, bias=False); lin.weight.data = torch.randn(V, E) * 0.05
    heads.append((Int8Linear(lin), Int4Linear(lin), lin.weight.data.bfloat16()))
flush = torch.ones(64 * 2**20)
res = {}
for rep in range(15):
    for T in (1, 3):
        x = torch.randn(1, T, E).bfloat16()
        for name in ("int8", "int4", "topk16", "rescore"):
            h8, h4, W = heads[rep % 6]
            flush.sum()
            t = time.perf_counter()
            if name == "int8": y = h8(x)
            elif name == "int4": y = h4(x)
            elif name == "topk16":
                y = h4(x).float(); idx = y.topk(16, dim=-1).indices
            else:
                y = h4(x).float(); idx = y.topk(16, dim=-1).indices
                ex = torch.einsum("bte,btke->btk", x.float(), W[idx].float()); y.scatter_(-1, idx, ex)
            res.setdefault((T, name), []).append(time.perf_counter() - t)
for k, v in res.items(): print(k, f"{statistics.median(v)*1e3:.3f} ms")
x = torch.randn(1, 1, V)
t = time.perf_counter()
for _ in range(200): x.topk(16, dim=-1)
print("topk16 alone [1,1,V]", (time.perf_counter() - t) / 200 * 1e3, "ms")
x = torch.randn(1, 3, V)
t = time.perf_counter()
for _ in range(200): x.topk(16, dim=-1)
print("topk16 alone [1,3,V]", (time.perf_counter() - t) / 200 * 1e3, "ms")
