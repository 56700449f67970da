"""Greedy extension bars in one process: off, 0.8, 0.9 (the default). python extab3.py S NEW ROUNDS"""
import sys, argparse, dataclasses, statistics, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime import gamma as G
S=int(sys.argv[1]); NEW=int(sys.argv[2]); R=int(sys.argv[3])
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","modes","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays","--new-tokens",str(NEW),"--gamma","auto"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=dataclasses.replace(base_run(args, mode="triforce", temperature=0.0), max_new_tokens=NEW)
eng=Engine(run, keep_prefill=True); ids=prompt_ids(eng,args,S)
orig=G.GammaTuner.extension
variants={"off": lambda self: None, "0.8": lambda self: dataclasses.replace(orig(self), confidence=0.8), "0.9": orig}
res={k:[] for k in variants}; passes={k:[] for k in variants}
eng.generate(ids, run)
for r in range(R):
    for name,f in variants.items():
        G.GammaTuner.extension=f
        out=eng.generate(ids, run)
        res[name].append(out.stats["ms_per_token"]); passes[name].append(out.stats["target_passes"])
    print(r, {k:(v[-1], passes[k][-1]) for k,v in res.items()}, flush=True)
for k,v in res.items(): print(k, "median ms/token %.3f  target passes %s" % (statistics.median(v), passes[k]))
