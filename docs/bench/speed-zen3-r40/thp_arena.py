# Round 40: 30 layers' weight blocks (SmolLM2-135M shapes), each its own allocation (blocks under 2 MB get 4 KB pages)
# against all of them as views into one allocation on 2 MB pages (what ops.one_allocation does), interleaved, 15 rounds, medians; one row.
#   .venv/bin/python docs/bench/speed-zen3-r40/thp_arena.py
import os, statistics, time
import triforce.runtime   # noqa: F401  (THP_MEM_ALLOC_ENABLE=1 before torch allocates)
import torch
from triforce.runtime import native, ops
torch.set_num_threads(2)
lay, qu = native.layer_cpu(), native.quant_cpu()
def anon_huge_kb():
    return int(open("/proc/self/smaps_rollup").read().split("AnonHugePages:")[1].split()[0])
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
for make in ("int4", "bf16"):
    blocks = []
    for L in range(30):
        for (O, K) in SHAPES:
            w = torch.randn(O, K).bfloat16()
            blocks.append((qu.quantize_int4(w) if make == "int4" else ops.pack(w), O, K))
    h0 = anon_huge_kb()
    total = sum((b.numel() * b.element_size() + 4095) // 4096 * 4096 for b, _, _ in blocks)
    arena = torch.empty(total, dtype=torch.uint8); arena.fill_(0)
    views, off = [], 0
    for b, O, K in blocks:
        n = b.numel() * b.element_size()
        v = arena[off:off + n].view(b.dtype).view(b.shape); v.copy_(b); views.append((v, O, K)); off += (n + 4095) // 4096 * 4096
    print(f"{make}: arena {total >> 20} MB, AnonHugePages +{anon_huge_kb() - h0} kB", flush=True)
    x = {K: torch.randn(1, K).bfloat16() for K in (576, 1536)}
    def run(bs):
        for b, O, K in bs:
            if make == "int4": qu.int4_linear(x[K], b, None, O)
            else: lay.linear_packed(x[K], b, None, O)
    ts = {"separate": [], "arena": []}
    for _ in range(15):
        for name, bs in (("separate", blocks), ("arena", views)):
            t0 = time.perf_counter(); run(bs); ts[name].append((time.perf_counter() - t0) * 1e3)
    a, b = statistics.median(ts["separate"]), statistics.median(ts["arena"])
    print(f"{make}: 120 linears, separate blocks {a:.2f} ms, one arena on 2 MB pages {b:.2f} ms ({a / b:.2f}x)", flush=True)
