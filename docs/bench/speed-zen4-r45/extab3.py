"""Greedy extension bars in one process: off, 0.8, 0.9 (the default). python extab3.py S NEW ROUNDS"""
import sys, argparse, dataclasses, statistics, torch
from common import triforce_request
from triforce.runtime import gamma as G
S=int(sys.argv[1]); NEW=int(sys.argv[2]); R=int(sys.argv[3])
args, eng, run, ids = triforce_request(S, 0.0, NEW)
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
