"""A level's pass, 1 against 2 threads alternated: python threads_level.py LEVEL S T PAIRS"""
import argparse, statistics, sys, time, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
level, S, T, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
lv = built_levels(engine, run, ids, S)[level]
n = lv.cache.get_seq_length(); x = torch.tensor([ids[S - T + 1:S + 1]])
ts = {1: [], 2: []}
with torch.inference_mode():
    for i in range(pairs):
        for th in ((1, 2) if i % 2 else (2, 1)):
            torch.set_num_threads(th)
            for _ in range(3):
                t0 = time.perf_counter(); lv.model(x, lv.cache); t = time.perf_counter() - t0; lv.cache.crop(n)
            ts[th].append(t)
a, b = statistics.median(ts[1]), statistics.median(ts[2])
print(f"{level} S={S} T={T}: 1 thread {1e3*a:.2f} ms, 2 threads {1e3*b:.2f} ms, speed-up {a/b:.2f}", flush=True)
