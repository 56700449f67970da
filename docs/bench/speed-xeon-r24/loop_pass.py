import argparse, sys, time
import torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
S, T, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
dtype = sys.argv[4] if len(sys.argv) > 4 else "bf16"
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype=dtype, rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
target = built_levels(engine, run, ids, S)["target"]
n = target.cache.get_seq_length()
x = torch.tensor([ids[S - T + 1:S + 1]])
times = []
print("ready", flush=True)
with torch.inference_mode():
    end = time.time() + secs
    while time.time() < end:
        t0 = time.perf_counter(); target.model(x, target.cache); times.append(time.perf_counter() - t0)
        target.cache.crop(n)
times.sort()
print(f"passes {len(times)}: min {1000*times[0]:.2f} median {1000*times[len(times)//2]:.2f} ms", flush=True)
