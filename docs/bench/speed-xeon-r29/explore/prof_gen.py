"""Profile one triforce request (bf16, essays, --gamma auto): python prof_gen.py CONTEXT NEW T ROPE|none"""
import argparse, cProfile, pstats, sys
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.bench.measure import generate_unstopped
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, T = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
rope = None if sys.argv[4] == "none" else sys.argv[4]
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, gamma="auto", temperature=T, retrieval_budget=1024, rope_scaling=rope)
engine = Engine(run, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
generate_unstopped(engine, ids, run)
prof = cProfile.Profile()
prof.enable()
r = generate_unstopped(engine, ids, run)
prof.disable()
s = r.stats
print(f"decode {s['decode_s']:.3f} s, {1e3*s['decode_s']/new:.2f} ms/token; levels " +
      ", ".join(f"{n} {v['seconds']:.3f} s" for n, v in s['levels'].items()) + f"; probe {s.get('gamma',{}).get('probe_s')}")
pstats.Stats(prof).sort_stats("tottime").print_stats(30)
