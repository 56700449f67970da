import sys, time, statistics, torch
from triforce.runtime import native
torch.set_num_threads(int(sys.argv[1])); torch.inference_mode().__enter__()
ac = native.attention_cpu()
flush = torch.ones(768 * 2**20 // 4)
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e6
Hkv = int(sys.argv[2]); N = 64   # N independent (layer) copies, timed one after another, cold
for S in (256, 512, 1024, 2048, 4096, 8192):
    k = torch.randn(N, 1, Hkv, S, 64).to(torch.bfloat16); v = torch.randn_like(k)
    q = torch.randn(1, 3 * Hkv, 1, 64).to(torch.bfloat16)
    c = []
    for r in range(5):
        flush.sum(); c.append(tm(lambda: [ac.attend(q, k[l], v[l], 0.125) for l in range(N)]) / N)
    nb = 2 * Hkv * S * 128
    print(f"threads {sys.argv[1]} Hkv {Hkv} S={S}: {statistics.median(c):.1f} us per call cold ({nb/1e3:.0f} KB, {nb/statistics.median(c)/1e3:.1f} GB/s)", flush=True)
