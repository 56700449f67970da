# attention at retrieval-cache sizes, bf16 against fp32 K/V, 30 layers in turn (cold: 256 MB read between passes), 2 threads
import time, torch, os
from triforce.runtime import native
torch.set_num_threads(2)
m = native.attention_cpu()
L = 30
junk = torch.ones(64 * 1024 * 1024)
for S in (1024, 2192, 4096):
    kv = {dt: ([torch.randn(1, 3, S, 64).to(dt) for _ in range(L)], [torch.randn(1, 3, S, 64).to(dt) for _ in range(L)]) for dt in (torch.bfloat16, torch.float32)}
    for T in (1, 2, 3, 5):
        q = {dt: torch.randn(1, 9, T, 64).to(dt) for dt in kv}
        res = {dt: [] for dt in kv}
        for r in range(9):
            for dt, (ks, vs) in kv.items():
                junk.add_(1.0)
                t = time.perf_counter()
                for i in range(L): m.attend(q[dt], ks[i], vs[i], 0.125)
                res[dt].append((time.perf_counter() - t) * 1000)
        med = {dt: sorted(v)[4] for dt, v in res.items()}
        print(f"S={S} T={T}: bf16 {med[torch.bfloat16]:.3f} ms, fp32 {med[torch.float32]:.3f} ms per 30 layers (fp32/bf16 {med[torch.float32]/med[torch.bfloat16]:.2f})", flush=True)
