# Round 40: in one process, 30 layers' linear weights (SmolLM2-135M shapes: qkv, o, gate_up, down) on 2 MB
# against 4 KB pages, interleaved, 15 rounds, medians: packed bf16 `linear_packed` (layer_cpu) and
# `int4_linear` (quant_cpu), one row. The int4 blocks (under 2 MB each) get no huge pages either way.
#   .venv/bin/python docs/bench/speed-zen3-r40/thp_linears.py
import ctypes, os, statistics, time
import triforce.runtime   # noqa: F401  (before torch allocates: THP_MEM_ALLOC_ENABLE=1)
import torch
from triforce.runtime import native, ops
assert os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"
libc = ctypes.CDLL("libc.so.6"); libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def anon_huge_kb():
    return int(open("/proc/self/smaps_rollup").read().split("AnonHugePages:")[1].split()[0])
def nohuge(t):
    p = t.data_ptr() & ~4095; n = t.data_ptr() + t.numel() * t.element_size() - p
    assert libc.madvise(p, n, 15) == 0
    return t
def weights(huge, make):
    out = []
    for L in range(30):
        ws = []
        for (O, K) in [(960, 576), (576, 576), (3072, 576), (576, 1536)]:
            w = torch.randn(O, K).bfloat16()
            if make == "bf16":
                p = ops.pack(w)
                t = torch.empty_like(p)
                if not huge: nohuge(t)
                t.copy_(p); ws.append((t, O, K))
            else:
                p = native.quant_cpu().quantize_int4(w)
                t = torch.empty_like(p)
                if not huge: nohuge(t)
                t.copy_(p); ws.append((t, O, K))
        out.append(ws)
    return out
torch.set_num_threads(2)
lay, qu = native.layer_cpu(), native.quant_cpu()
for make in ("bf16", "int4"):
    h0 = anon_huge_kb()
    sets = {h: weights(h, make) for h in (False, True)}
    print(f"{make}: AnonHugePages +{anon_huge_kb() - h0} kB", flush=True)
    x = {K: torch.randn(1, K).bfloat16() for K in (576, 1536)}
    ts = {False: [], True: []}
    for _ in range(15):
        for h in (False, True):
            t0 = time.perf_counter()
            for ws in sets[h]:
                for w in ws:
                    if make == "bf16": lay.linear_packed(x[w[2]], w[0], None, w[1])
                    else: qu.int4_linear(x[w[2]], w[0], None, w[1])
            ts[h].append((time.perf_counter() - t0) * 1e3)
    a, b = statistics.median(ts[False]), statistics.median(ts[True])
    print(f"{make}: 30 layers' linears, 4 KB pages {a:.2f} ms, 2 MB pages {b:.2f} ms ({a / b:.2f}x)", flush=True)
    del sets
