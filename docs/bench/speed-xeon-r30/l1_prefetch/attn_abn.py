"""kernel.attend A/B/C.. of XP_MODE values, interleaved per call: python attn_abn.py REPS "T list" MODES S..."""
import itertools, os, statistics, sys, time
import torch
from triforce.runtime.native import attention_cpu
torch.set_num_threads(2)
k = attention_cpu()
reps, Ts, modes = int(sys.argv[1]), [int(t) for t in sys.argv[2].split()], sys.argv[3].split()
B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
for S in [int(x) for x in sys.argv[4:]]:
    nbytes = 2 * B * Hkv * S * D * 2
    bufs = [(torch.randn(B, Hkv, S + 64, D, dtype=dt), torch.randn(B, Hkv, S + 64, D, dtype=dt)) for _ in range(max(2, (400 << 20) // nbytes))]
    for T in Ts:
        q = torch.randn(B, H, T, D, dtype=dt)
        rot = itertools.cycle(bufs)
        ts = {m: [] for m in modes}
        for _ in range(reps):
            for m in modes:
                os.environ["XP_MODE"] = m
                kc, vc = next(rot)
                t0 = time.perf_counter(); k.attend(q, kc[:, :, :S], vc[:, :, :S], D ** -0.5); ts[m].append(time.perf_counter() - t0)
        base = statistics.median(ts[modes[0]])
        print(f"S={S:>6} T={T}: " + "  ".join(f"{m}: {statistics.median(ts[m])*1e6:7.1f} us ({statistics.median(ts[m])/base:.3f})" for m in modes), flush=True)
