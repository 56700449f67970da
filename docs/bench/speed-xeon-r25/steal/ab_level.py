"""In-process A/B of a scratch switch `set_steal` of MODULE (quant_cpu or layer_cpu): a level's
T-token pass at S (bf16 engine, int4 middle level, budget 1,024), interleaved pass by pass in both orders.
usage: ab_level.py MODULE LEVEL S T,T,... REPS"""
import argparse, statistics, sys, time
import torch
from triforce.runtime import native
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

mod_name, level, S = sys.argv[1], sys.argv[2], int(sys.argv[3])
Ts = [int(t) for t in sys.argv[4].split(",")]; reps = int(sys.argv[5])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
lv = built_levels(engine, run, ids, S)[level]
mod = getattr(native, mod_name)()
n = lv.cache.get_seq_length()
times = {(c, T): [] for c in (0, 1) for T in Ts}
with torch.inference_mode():
    outs = {}
    for c in (0, 1):
        mod.set_steal(bool(c))
        outs[c] = lv.model(torch.tensor([ids[S - 3:S + 1]]), lv.cache)
        lv.cache.crop(n)
    print("same logits:", torch.equal(outs[0], outs[1]), flush=True)
    for rep in range(reps):
        for T in Ts:
            x = torch.tensor([ids[S - T + 1:S + 1]])
            for c in ((0, 1) if rep % 2 else (1, 0)):
                mod.set_steal(bool(c))
                t0 = time.perf_counter(); lv.model(x, lv.cache); times[(c, T)].append(time.perf_counter() - t0)
                lv.cache.crop(n)
for T in Ts:
    a, b = times[(0, T)], times[(1, T)]
    print(f"{level} S={S} T={T}: static: median {1000*statistics.median(a):.2f} min {1000*min(a):.2f} | stealing: median "
          f"{1000*statistics.median(b):.2f} min {1000*min(b):.2f} | faster in {sum(y < x for x, y in zip(a, b))}/{len(a)} pairs; "
          f"median of pair ratios {statistics.median(y / x for x, y in zip(a, b)):.3f}", flush=True)
