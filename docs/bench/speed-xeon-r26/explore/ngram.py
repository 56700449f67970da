import torch
import argparse, dataclasses, sys
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(2)
run = RunConfig(mode="ar", dtype="bf16", rope_scaling="yarn:4" if context > 8000 else None)
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
for temperature in (0.0, 0.6):
    out = engine.generate(ids, dataclasses.replace(run, temperature=temperature, max_new_tokens=new)).token_ids
    seq = ids + out
    hits = {1: 0, 2: 0, 3: 0}
    for i in range(len(ids), len(seq)):
        for m in (3, 2, 1):
            suf = seq[i - m:i]; pred = None
            for j in range(i - m - 1, -1, -1):
                if seq[j:j + m] == suf: pred = seq[j + m]; break
            if pred is not None:
                hits[m] += pred == seq[i]; break
    print(temperature, {k: round(v / len(out), 3) for k, v in hits.items()}, "total", round(sum(hits.values()) / len(out), 3))
    print(repr(engine.tokenizer.decode(out)[:600]))
