"""The set-up round 45's end-to-end scripts share: a `triforce` request of NEW tokens at temperature T over
the first S tokens of the essays, bf16, 2 threads, --gamma auto (32K: yarn:4), on an engine that keeps its
prefill. Returns (the bench arguments, the engine, the request, the prompt's ids)."""
import argparse
import os
import dataclasses

import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine


def triforce_request(S: int, T: float, NEW: int):
    p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
    args = p.parse_args(["bench", "--suite", "modes", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                         "--corpus", "essays", "--new-tokens", str(NEW), "--gamma", "auto"]
                        + (["--rope-scaling", os.environ.get("ROPE", "yarn:4")] if S > 8000 else []))
    torch.set_num_threads(2)
    run = dataclasses.replace(base_run(args, mode="triforce", temperature=T), max_new_tokens=NEW)
    engine = Engine(run, keep_prefill=True)
    return args, engine, run, prompt_ids(engine, args, S)


def swapped_plan(level, T: int, x, n: int, slot: int, mod):
    """level's decoder plan with the native module at plan_kernels()[slot] replaced by `mod` (an
    instrumented build of it: tl2.py, tl3.py), and the arguments of one T-token pass (tokens x) on
    its cache, rolled back to its n tokens. Returns (plan, args): plan.run(*args) is the pass."""
    from triforce.runtime import model as M
    kernels = list(M.plan_kernels())
    kernels[slot] = mod
    M.plan_kernels = lambda: tuple(kernels)
    M._PLANS.pop(level.model, None)
    plan, c = M.decoder_plan(level.model), level.cache
    with torch.inference_mode():
        cos, sin = c.begin(T); xe = level.model.model.embed_tokens(x); slots = c.slots(); c.end(); c.crop(n)
    return plan, (xe, cos, sin, *slots)
