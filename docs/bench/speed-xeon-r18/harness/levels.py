"""Scratch, round 18: the triforce levels over S tokens as the passes suite builds them (bf16, 2 threads,
int4 middle level and drafter, drafter vocab 4096, budget 1,024, yarn:4), for the harnesses beside it."""
import argparse

import torch

from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine


def levels_at(S: int):
    """(ids, {"target", "retrieval", "drafter"} levels) over the essays' first S tokens."""
    torch.set_num_threads(2)
    ap = argparse.ArgumentParser()
    add_bench_parser(ap.add_subparsers(dest="command"))
    args = ap.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                          "--budget", "1024", "--middle-weights", "int4", "--draft-weights", "int4",
                          "--draft-vocab", "4096", "--rope-scaling", "yarn:4", "--contexts", str(S)])
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 20)
    return ids, built_levels(engine, run, ids, S)
