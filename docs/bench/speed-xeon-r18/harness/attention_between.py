import sys, time, statistics, torch
from triforce.runtime import native
torch.set_num_threads(2); torch.inference_mode().__enter__()
ac = native.attention_cpu()
N = 30; S = int(sys.argv[1]); mb = float(sys.argv[2])
k = torch.randn(N, 1, 3, S, 64).to(torch.bfloat16); v = torch.randn_like(k)
q = torch.randn(1, 9, int(sys.argv[3]), 64).to(torch.bfloat16)
other = [torch.ones(int(mb * 2**20) // 4) for _ in range(N)]   # a layer's weights streamed between two attention calls
flush = torch.ones(768 * 2**20 // 4)
att, oth = [], []
for r in range(7):
    flush.sum(); ta = to = 0.0
    for l in range(N):
        t0 = time.perf_counter(); other[l].sum(); t1 = time.perf_counter(); ac.attend(q, k[l], v[l], 0.125); t2 = time.perf_counter()
        ta += t2 - t1; to += t1 - t0
    att.append(ta * 1e3); oth.append(to * 1e3)
nb = N * 2 * 3 * S * 128
m = statistics.median
print(f"S={S} T={q.shape[2]} with {mb} MB read between calls: attention {m(att):.2f} ms ({nb/m(att)/1e6:.1f} GB/s), the reads {m(oth):.2f} ms ({N*mb*2**20/m(oth)/1e6:.1f} GB/s)")
