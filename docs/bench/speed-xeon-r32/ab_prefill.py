"""Prefill attention A/B: kernel.attend for a T-token chunk at the end of S keys; each mode is
'base' (no switch) or the names of scratch env switches joined by '+', interleaved per call."""
import os, statistics, sys, time
import torch
from triforce.runtime.native import attention_cpu
torch.set_num_threads(2)
k = attention_cpu()
reps, T, modes = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
switches = {s for m in modes for s in m.split("+") if s != "base"}
B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
torch.manual_seed(0)
for S in [int(x) for x in sys.argv[4:]]:
    kc, vc = torch.randn(B, Hkv, S, D, dtype=dt), torch.randn(B, Hkv, S, D, dtype=dt)
    q = torch.randn(B, H, T, D, dtype=dt) * 2
    flop = 4 * D * sum(S - T + t + 1 for t in range(T)) * H
    ts, outs = {m: [] for m in modes}, {}
    for _ in range(reps):
        for m in modes:
            for s in switches: os.environ.pop(s, None)
            for s in m.split("+"):
                if s != "base": os.environ[s] = "1"
            t0 = time.perf_counter(); o = k.attend(q, kc, vc, D ** -0.5); ts[m].append(time.perf_counter() - t0)
            outs[m] = o
    base = statistics.median(ts[modes[0]])
    ref = outs[modes[0]].float()
    def diff(m):
        if torch.equal(outs[m], outs[modes[0]]): return ""
        return f" maxdiff {(outs[m].float() - ref).abs().max().item():.2e}"
    print(f"S={S:>6} T={T}: " + "  ".join(f"{m}: {statistics.median(ts[m])*1e3:7.2f} ms {flop/statistics.median(ts[m])/1e9:5.0f} GF/s ({statistics.median(ts[m])/base:.3f}{diff(m)})" for m in modes), flush=True)
