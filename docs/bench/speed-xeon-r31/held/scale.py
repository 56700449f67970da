"""Attention: 1 vs 2 threads, interleaved per call, same process. python scale.py REPS S..."""
import itertools, statistics, sys, time, torch
from triforce.runtime.native import attention_cpu
k = attention_cpu()
B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
reps = int(sys.argv[1])
for S in [int(x) for x in sys.argv[2:]]:
    nbytes = 2 * B * Hkv * S * D * 2
    nb = max(1, (int(sys.argv[0] and 400) << 20) // nbytes) if S >= 8192 else 1
    bufs = [(torch.randn(B, Hkv, S, D, dtype=dt), torch.randn(B, Hkv, S, D, dtype=dt)) for _ in range(nb)]
    rot = itertools.cycle(bufs)
    for T in (1, 4, 8):
        q = torch.randn(B, H, T, D, dtype=dt)
        ts = {1: [], 2: []}
        for _ in range(reps):
            for th in (1, 2):
                torch.set_num_threads(th)
                kc, vc = next(rot)
                t0 = time.perf_counter(); k.attend(q, kc, vc, D ** -0.5); ts[th].append(time.perf_counter() - t0)
        a, b = statistics.median(ts[1]), statistics.median(ts[2])
        print(f"S={S:>6} T={T} ({'hot' if nb == 1 else f'{nb} bufs'}): 1 thread {a*1e6:8.1f} us, 2 threads {b*1e6:8.1f} us, speed-up {a/b:.2f}", flush=True)
