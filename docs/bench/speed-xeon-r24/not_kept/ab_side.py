"""In-process A/B of the side prefetch: the target's bf16 T-token pass at S, configurations
interleaved pass by pass (robust to a host whose speed drifts)."""
import os, statistics, sys, time
import torch
from triforce.runtime import native
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import target_level  # noqa: E402

S = int(sys.argv[1]); Ts = [int(t) for t in sys.argv[2].split(",")]; reps = int(sys.argv[3])
CFGS = {"off": (0, 12, 1 << 30, 2), "T2": (1, 12, 1 << 30, 2), "T1": (1, 12, 1 << 30, 1), "T1_1MB": (1, 12, 1024, 1),
        "T2_2MB": (1, 12, 2048, 2)}
target, ids = target_level(S)
att = native.attention_cpu()
times = {(c, T): [] for c in CFGS for T in Ts}
n = target.cache.get_seq_length()
with torch.inference_mode():
    for rep in range(reps):
        for T in Ts:
            x = torch.tensor([ids[S - T + 1:S + 1]])
            for c, opt in CFGS.items():
                att.set_side_options(*opt)
                t0 = time.perf_counter()
                target.model(x, target.cache)
                times[(c, T)].append(time.perf_counter() - t0)
                target.cache.crop(n)
for T in Ts:
    base = statistics.median(times[("off", T)][2:])
    print(f"T={T}: " + "  ".join(f"{c} {1000 * statistics.median(times[(c, T)][2:]):.2f} ms (min {1000 * min(times[(c, T)]):.2f}, {statistics.median(times[(c, T)][2:]) / base:.3f})" for c in CFGS))
