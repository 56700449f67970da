"""Per-level time of triforce requests: python levels32k.py CONTEXT NEW ROPE|none T..."""
import argparse, sys, json, dataclasses
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.bench.measure import generate_unstopped
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new = int(sys.argv[1]), int(sys.argv[2])
rope = None if sys.argv[3] == "none" else sys.argv[3]
temps = [float(t) for t in sys.argv[4:]]
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, gamma="auto", temperature=0.0, rope_scaling=rope)
engine = Engine(run, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
for T in temps:
    for rep in range(2):
        r = generate_unstopped(engine, ids, dataclasses.replace(run, temperature=T))
        s = r.stats
        print(f"T={T} rep{rep} decode {s['decode_s']:.3f} s {1e3*s['decode_s']/new:.2f} ms/token")
        for n, v in s['levels'].items():
            print("   ", n, json.dumps(v))
        print("   gamma", json.dumps(s.get('gamma', {}))[:600], flush=True)
