import argparse, sys, time, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime import model as M
level, S, T, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
lv = built_levels(engine, run, ids, S)[level]
m, cache = lv.model, lv.cache
n = cache.get_seq_length(); x = torch.tensor([ids[S - T + 1:S + 1]])
plan = M.decoder_plan(m)
full, runs, heads = [], [], []
with torch.inference_mode():
    for r in range(reps):
        t0 = time.perf_counter(); m(x, cache, last_only=1); full.append(time.perf_counter() - t0); cache.crop(n)
        cos, sin = cache.begin(T); e = m.model.embed_tokens(x); slots = cache.slots()
        t0 = time.perf_counter(); h = plan.run(e, cos, sin, *slots); runs.append(time.perf_counter() - t0)
        cache.end(); cache.crop(n)
        t0 = time.perf_counter(); m.lm_head(m.model.norm(h[:, -1:])).float(); heads.append(time.perf_counter() - t0)
for k, v in [("full", full), ("plan.run", runs), ("head", heads)]:
    v.sort(); print(f"{k:10s} min {1000*v[0]:.3f} median {1000*v[len(v)//2]:.3f}")
