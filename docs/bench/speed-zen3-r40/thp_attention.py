# Round 40: in one process, 30 layers' K/V on 2 MB pages against the same on 4 KB pages (MADV_NOHUGEPAGE
# before the first touch), the native attention kernel, interleaved, 9 rounds, medians.
#   .venv/bin/python docs/bench/speed-zen3-r40/thp_attention.py      (triforce.runtime sets THP_MEM_ALLOC_ENABLE=1)
import ctypes, os, statistics, time
import triforce.runtime   # noqa: F401  (before torch allocates: THP_MEM_ALLOC_ENABLE=1)
import torch
from triforce.runtime import native
assert os.environ.get("THP_MEM_ALLOC_ENABLE") == "1"
libc = ctypes.CDLL("libc.so.6"); libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
def anon_huge_kb():
    return int(open("/proc/self/smaps_rollup").read().split("AnonHugePages:")[1].split()[0])
def alloc(shape, huge):
    t = torch.empty(shape, dtype=torch.bfloat16)
    if not huge:
        p = t.data_ptr() & ~4095; n = t.data_ptr() + t.numel() * 2 - p
        assert libc.madvise(p, n, 15) == 0   # MADV_NOHUGEPAGE
    t.copy_(torch.randn(shape).bfloat16())
    return t
m = native.attention_cpu()
torch.set_num_threads(2)
for S, T in [(8192, 1), (8192, 3), (32768, 1), (32768, 3)]:
    q = torch.randn(1, 9, T, 64).bfloat16()
    h0 = anon_huge_kb()
    sets = {}
    for huge in (False, True):
        sets[huge] = (alloc((30, 1, 3, S, 64), huge), alloc((30, 1, 3, S, 64), huge))
        print(f"  huge={huge}: AnonHugePages +{anon_huge_kb() - h0} kB", flush=True)
    ts = {False: [], True: []}
    for _ in range(9):
        for huge in (False, True):
            K, V = sets[huge]
            t0 = time.perf_counter()
            for L in range(30): m.attend(q, K[L], V[L], 0.125)
            ts[huge].append((time.perf_counter() - t0) / 30 * 1e3)
    a, b = statistics.median(ts[False]), statistics.median(ts[True])
    print(f"S={S} T={T}: 4 KB pages {a:.3f} ms, 2 MB pages {b:.3f} ms per layer ({a / b:.2f}x)", flush=True)
    del sets
