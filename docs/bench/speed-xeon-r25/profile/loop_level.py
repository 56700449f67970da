import argparse, sys, time, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
level, S, T, secs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
lv = built_levels(engine, run, ids, S)[level]
n = lv.cache.get_seq_length(); x = torch.tensor([ids[S - T + 1:S + 1]])
print("ready", flush=True); ts = []
with torch.inference_mode():
    end = time.time() + secs
    while time.time() < end:
        t0 = time.perf_counter(); lv.model(x, lv.cache); ts.append(time.perf_counter() - t0); lv.cache.crop(n)
ts.sort(); print(f"passes {len(ts)}: min {1000*ts[0]:.2f} median {1000*ts[len(ts)//2]:.2f} ms", flush=True)
