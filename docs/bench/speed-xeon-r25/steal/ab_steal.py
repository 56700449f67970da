"""In-process A/B: AMX linears split statically (before) or with stealing (after);
the target's T-token pass at S, interleaved pass by pass in both orders."""
import os, statistics, sys, time
import torch
from triforce.runtime import native
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "speed-xeon-r24"))
from harness import target_level  # noqa: E402

S = int(sys.argv[1]); Ts = [int(t) for t in sys.argv[2].split(",")]; reps = int(sys.argv[3])
dtype = sys.argv[4] if len(sys.argv) > 4 else "bf16"
target, ids = target_level(S, dtype)
att = native.layer_cpu()
n = target.cache.get_seq_length()
times = {(c, T): [] for c in (0, 1) for T in Ts}
with torch.inference_mode():
    outs = {}
    for c in (0, 1):
        att.set_steal(bool(c))
        outs[c] = target.model(torch.tensor([ids[S - 3:S + 1]]), target.cache)
        target.cache.crop(n)
    print("same logits:", torch.equal(outs[0], outs[1]), "max diff", (outs[0].float() - outs[1].float()).abs().max().item(), flush=True)
    for rep in range(reps):
        for T in Ts:
            x = torch.tensor([ids[S - T + 1:S + 1]])
            for c in ((0, 1) if rep % 2 else (1, 0)):
                att.set_steal(bool(c))
                t0 = time.perf_counter()
                target.model(x, target.cache)
                times[(c, T)].append(time.perf_counter() - t0)
                target.cache.crop(n)
for T in Ts:
    a, b = times[(0, T)], times[(1, T)]
    wins = sum(y < x for x, y in zip(a, b))
    print(f"S={S} T={T}: static split: median {1000 * statistics.median(a):.2f} min {1000 * min(a):.2f} | stealing: median "
          f"{1000 * statistics.median(b):.2f} min {1000 * min(b):.2f} | faster in {wins}/{len(a)} pairs; "
          f"median of pair ratios {statistics.median(y / x for x, y in zip(a, b)):.3f}", flush=True)
