"""Round 24's scratch harnesses share this: the target level of a bf16 (or fp32) `triforce` engine
over S tokens of the essays, its cache filled with random K/V as the passes suite fills it."""
import argparse

import torch

from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine


def target_level(S: int, dtype: str = "bf16"):
    """(the target level on a full cache of S tokens, the prompt's ids), 2 torch threads."""
    torch.set_num_threads(2)
    run = RunConfig(mode="triforce", dtype=dtype, rope_scaling="yarn:4", retrieval_budget=1024, middle_weights="int4")
    engine = Engine(run)
    ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), S + 20)
    return built_levels(engine, run, ids, S)["target"], ids
