"""The set-up round 45's end-to-end scripts share: a `triforce` request of NEW tokens at temperature T over
the first S tokens of the essays, bf16, 2 threads, --gamma auto (32K: yarn:4), on an engine that keeps its
prefill. Returns (the bench arguments, the engine, the request, the prompt's ids)."""
import argparse
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
                        + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
    torch.set_num_threads(2)
    run = dataclasses.replace(base_run(args, mode="triforce", temperature=T), max_new_tokens=NEW)
    engine = Engine(run, keep_prefill=True)
    return args, engine, run, prompt_ids(engine, args, S)
