# Round 34, Zen 3: the AVX2 attention items against the fp32 reference (max error, row invariance), then
# timed against torch's flash kernel (one layer: 3 KV heads, G = 3, D = 64, bf16). Run: .venv/bin/python docs/bench/speed-zen3-r34/attention_avx2.py
import time, statistics, torch
from triforce.runtime import native
from triforce.runtime.attention import attend_reference, _attend_sdpa_split
torch.set_num_threads(2)
m = native.attention_cpu()
worst = 0
for dt in (torch.float32, torch.bfloat16):
    for (T, S, G, D) in ((1, 1, 3, 64), (1, 37, 3, 64), (3, 100, 3, 64), (7, 1030, 1, 32), (16, 2100, 3, 64), (32, 600, 8, 16), (5, 3000, 2, 128)):
        g = torch.Generator().manual_seed(T * 100 + S)
        q = torch.randn(2, 2 * G, T, D, generator=g).to(dt); k = torch.randn(2, 2, S, D, generator=g).to(dt); v = torch.randn(2, 2, S, D, generator=g).to(dt)
        out = m.attend(q, k, v, D ** -0.5).float(); ref = attend_reference(q.float(), k.float(), v.float()).float()
        err = (out - ref).abs().max().item(); worst = max(worst, err if dt == torch.float32 else 0)
        print(dt, T, S, G, D, f"max err {err:.2e}")
        # row invariance: token t of a T pass == a 1-token pass at S - T + t + 1
        for t in (0, T - 1):
            one = m.attend(q[:, :, t:t + 1], k[:, :, :S - T + t + 1], v[:, :, :S - T + t + 1], D ** -0.5)
            assert torch.equal(one[:, 0], m.attend(q, k, v, D ** -0.5)[:, t]), (dt, T, S, t)
print("row-invariant; fp32 worst", worst)
def t(fn, n=10):
    fn(); ts=[]
    for _ in range(n):
        t0=time.perf_counter(); fn(); ts.append(time.perf_counter()-t0)
    return statistics.median(ts)*1e3
for S in (1024, 8192, 32768):
    for T in (1, 2, 4, 8):
        q = torch.randn(1, 9, T, 64).bfloat16(); k = torch.randn(1, 3, S, 64).bfloat16(); v = torch.randn(1, 3, S, 64).bfloat16()
        a = t(lambda: m.attend(q, k, v, 0.125)); b = t(lambda: _attend_sdpa_split(q, k, v))
        print(f"S={S} T={T}: avx2 {a:.3f} ms ({2*k.numel()*2/a/1e6:.1f} GB/s, {4*9*T*S*64/a/1e6:.0f} GFLOP/s)  sdpa {b:.3f} ms")
