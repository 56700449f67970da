# Round 35, Zen 3: one layer's attention (3 KV heads, G = 3, D = 64, bf16) through the native AVX2
# items, for T = 1..16 at 8K and 32K keys, and the outputs saved, so that two builds can be compared
# bitwise and timed in turn. Run (the build in $TRIFORCE_NATIVE_DIR, default build/native):
#   .venv/bin/python docs/bench/speed-zen3-r35/attention_tiles.py OUT.pt [OTHER.pt]
# With OTHER.pt (the other build's outputs) it asserts the outputs are bitwise equal.
import statistics, sys, time, torch
from triforce.runtime import native
torch.set_num_threads(2)
m = native.attention_cpu()
outs, rows = {}, []
def timed(fn, n=9):
    fn(); ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
for dt in (torch.bfloat16, torch.float32):
    for S in (8192, 32768):
        for T in (1, 2, 4, 8, 16):
            g = torch.Generator().manual_seed(S + T)
            q = torch.randn(1, 9, T, 64, generator=g).to(dt)
            k = torch.randn(1, 3, S, 64, generator=g).to(dt); v = torch.randn(1, 3, S, 64, generator=g).to(dt)
            outs[(str(dt), S, T)] = m.attend(q, k, v, 0.125)
            ms = timed(lambda: m.attend(q, k, v, 0.125))
            print(f"{dt} S={S} T={T:>2}: {ms:7.3f} ms  {4 * 9 * T * S * 64 / ms / 1e6:5.1f} GFLOP/s  "
                  f"{2 * k.numel() * k.element_size() / ms / 1e6:5.1f} GB/s", flush=True)
torch.save(outs, sys.argv[1])
if len(sys.argv) > 2:
    other = torch.load(sys.argv[2])
    assert all(torch.equal(outs[key], other[key]) for key in outs), "outputs differ"
    print("bitwise equal to", sys.argv[2])
