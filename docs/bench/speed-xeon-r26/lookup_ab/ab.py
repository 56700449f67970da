"""Context lookup on / off side by side in one process (measure_side_by_side: repeats round-robin):
python ab.py CONTEXT REPEATS. bf16, essays, 128 tokens, --gamma auto, triforce; T = 0 and 0.6."""
import torch
import argparse, dataclasses, sys
from triforce.runtime.bench.measure import measure_side_by_side
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, repeats = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=128, gamma="auto", retrieval_budget=1024,
                 rope_scaling="yarn:4" if context > 8000 else None)
engine = Engine(base, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
for temperature in (0.0, 0.6):
    runs = [dataclasses.replace(base, temperature=temperature, top_p=0.9, lookup=on) for on in (True, False)]
    on, off = measure_side_by_side(engine, ids, runs, repeats)
    pairs = sorted(b / a for a, b in zip(on["ms_per_token"]["all"], off["ms_per_token"]["all"]))
    print(f"ctx {context} T {temperature}: lookup on {on['ms_per_token']['all']} off {off['ms_per_token']['all']} ms/token; "
          f"off/on per repeat {[round(x, 2) for x in pairs]}, median {pairs[len(pairs) // 2]:.2f}; copies {on['copied']}", flush=True)
