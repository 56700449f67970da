"""In-process A/B of the held items' L1 prefetch (toggle.patch: attention_cpu.set_l1): a level's T-token pass at S, off (0) and on (1) alternated pass by pass in both orders.
    ab_switch.py MODULE SETTER LEVEL S T,T,... REPS [bf16|fp32]
e.g. ab_switch.py attention_cpu set_words target 8000 1,4,8 30     (v_in_place/)
     ab_switch.py layer_cpu set_steal target 32000 1,4,8 16 fp32   (steal/)
     ab_switch.py quant_cpu set_steal retrieval 7000 1,2,4 40      (steal/)
The engine: bf16 (or fp32) `triforce`, yarn:4, an int4 middle level on a 1,024-slot retrieval
cache; the target's cache filled with random K/V as the passes suite fills it."""
import argparse
import statistics
import sys
import time

import torch

from triforce.runtime import native
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

module, setter, level, S = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
Ts = [int(t) for t in sys.argv[5].split(",")]
reps = int(sys.argv[6])
dtype = sys.argv[7] if len(sys.argv) > 7 else "bf16"
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype=dtype, rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
lv = built_levels(engine, run, ids, S)[level]
switch = getattr(getattr(native, module)(), setter)
n = lv.cache.get_seq_length()
times = {(c, T): [] for c in (0, 1) for T in Ts}
with torch.inference_mode():
    outs = {}
    for c in (0, 1):
        switch(bool(c))
        outs[c] = lv.model(torch.tensor([ids[S - 3:S + 1]]), lv.cache)
        lv.cache.crop(n)
    print("same logits:", torch.equal(outs[0], outs[1]), "max diff", (outs[0].float() - outs[1].float()).abs().max().item(), flush=True)
    for rep in range(reps):
        for T in Ts:
            x = torch.tensor([ids[S - T + 1:S + 1]])
            for c in ((0, 1) if rep % 2 else (1, 0)):
                switch(bool(c))
                t0 = time.perf_counter()
                lv.model(x, lv.cache)
                times[(c, T)].append(time.perf_counter() - t0)
                lv.cache.crop(n)
for T in Ts:
    a, b = times[(0, T)], times[(1, T)]
    print(f"{level} S={S} T={T}: off: median {1000 * statistics.median(a):.2f} min {1000 * min(a):.2f} | on: median "
          f"{1000 * statistics.median(b):.2f} min {1000 * min(b):.2f} | on faster in {sum(y < x for x, y in zip(a, b))}/{len(a)} "
          f"pairs; median of pair ratios {statistics.median(y / x for x, y in zip(a, b)):.3f}", flush=True)
