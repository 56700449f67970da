import torch, time
from triforce.runtime import quant
k = quant._native_kernels()
g = torch.Generator().manual_seed(0)
bad = 0
for O, K in [(16, 32), (1000, 100), (960, 576), (33, 70), (576, 1536), (7, 31), (3072, 576)]:
    for dt in (torch.bfloat16, torch.float32):
        w = (torch.randn(O, K, generator=g) * 0.05).to(dt)
        w[0, :5] = 0
        if O > 2: w[2] = 0.01   # a constant row
        a = k.quantize_int4(w); b = quant.int4_packed_reference(w)
        p8, s8 = k.quantize_int8(w); r8, rs = quant.int8_packed_reference(w)
        ok4, ok8 = torch.equal(a, b), torch.equal(p8, r8) and torch.equal(s8, rs)
        if not (ok4 and ok8):
            bad += 1
            print("MISMATCH", O, K, dt, ok4, ok8, (a != b).sum().item() if a.shape == b.shape else a.shape)
print("bad", bad)
w = torch.randn(3072, 576).to(torch.bfloat16)
for fn, name in ((k.quantize_int4, "native int4"), (quant.int4_packed_reference, "torch int4"), (k.quantize_int8, "native int8"), (quant.int8_packed_reference, "torch int8")):
    fn(w); t = time.perf_counter()
    for _ in range(10): fn(w)
    print(name, round((time.perf_counter() - t) / 10 * 1e3, 2), "ms")
