"""In-process A/B: packed AMX linears split by runs of 4 blocks (as shipped) or evenly by block;
the target's bf16 T-token pass at S, the two interleaved pass by pass."""
import argparse, statistics, sys, time
import torch
from triforce.runtime import native
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

S = int(sys.argv[1]); Ts = [int(t) for t in sys.argv[2].split(",")]; reps = int(sys.argv[3])
dtype = sys.argv[4] if len(sys.argv) > 4 else "bf16"
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype=dtype, rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
target = built_levels(engine, run, ids, S)["target"]
layer = native.layer_cpu()
n = target.cache.get_seq_length()
times = {(c, T): [] for c in (0, 1) for T in Ts}
with torch.inference_mode():
    outs = {}
    for c in (0, 1):   # the same bits either way (the split changes who computes a block, not how)
        layer.set_split_even(c)
        outs[c] = target.model(torch.tensor([ids[S - 3:S + 1]]), target.cache)
        target.cache.crop(n)
    assert torch.equal(outs[0], outs[1])
    for rep in range(reps):
        for T in Ts:
            x = torch.tensor([ids[S - T + 1:S + 1]])
            for c in ((0, 1) if rep % 2 else (1, 0)):
                layer.set_split_even(c)
                t0 = time.perf_counter()
                target.model(x, target.cache)
                times[(c, T)].append(time.perf_counter() - t0)
                target.cache.crop(n)
for T in Ts:
    a, b = times[(0, T)], times[(1, T)]
    wins = sum(y < x for x, y in zip(a, b))
    print(f"T={T}: runs of 4: median {1000 * statistics.median(a):.2f} min {1000 * min(a):.2f} | even: median "
          f"{1000 * statistics.median(b):.2f} min {1000 * min(b):.2f} | even faster in {wins}/{len(a)} pairs; "
          f"median of pair ratios {statistics.median(y / x for x, y in zip(a, b)):.3f}")
