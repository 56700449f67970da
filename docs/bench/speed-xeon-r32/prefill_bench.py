"""Prefill attention: time kernel.attend for a T-token chunk at the end of S keys (XP_MODE modes interleaved)."""
import itertools, os, statistics, sys, time
import torch
from triforce.runtime.native import attention_cpu
torch.set_num_threads(2)
k = attention_cpu()
reps, T, modes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
for S in [int(x) for x in sys.argv[4:]]:
    kc, vc = torch.randn(B, Hkv, S, D, dtype=dt), torch.randn(B, Hkv, S, D, dtype=dt)
    q = torch.randn(B, H, T, D, dtype=dt)
    vis = sum(S - T + t + 1 for t in range(T))
    flop = 4 * D * vis * H
    ts = {m: [] for m in modes}
    outs = {}
    for _ in range(reps):
        for m in modes:
            os.environ["XP_MODE"] = m
            if m == "old": os.environ["XP_OLD"] = "1"
            else: os.environ.pop("XP_OLD", None)
            t0 = time.perf_counter(); o = k.attend(q, kc, vc, D ** -0.5); ts[m].append(time.perf_counter() - t0)
            outs[m] = o
    base = statistics.median(ts[modes[0]])
    same = {m: torch.equal(outs[m], outs[modes[0]]) for m in modes}
    print(f"S={S:>6} T={T}: " + "  ".join(f"{m}: {statistics.median(ts[m])*1e3:7.2f} ms {flop/statistics.median(ts[m])/1e9:6.0f} GF/s ({statistics.median(ts[m])/base:.3f}{'' if same[m] else ' DIFF'})" for m in modes), flush=True)
