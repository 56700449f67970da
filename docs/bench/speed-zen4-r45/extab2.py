"""Draft extension at T > 0 in one process: off, on at a bar of 0.9, and at 0.99.
python extab2.py S T NEW ROUNDS [variants,comma,separated]"""
import sys, argparse, dataclasses, statistics, torch
from common import triforce_request
from triforce.runtime import gamma as G
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3]); R=int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
orig=G.GammaTuner.extension
variants={"off": lambda self: None, "on90": lambda self: dataclasses.replace(orig(self), confidence=0.9),
          "on99": orig}   # (the early stop measured in round 45 was a patch: stop_early.patch)
if len(sys.argv) > 5: variants = {k: variants[k] for k in sys.argv[5].split(",")}
res={k:[] for k in variants}; passes={k:[] for k in variants}
eng.generate(ids, run)
for r in range(R):
    for name,f in variants.items():
        G.GammaTuner.extension=f
        out=eng.generate(ids, dataclasses.replace(run, seed=r))
        res[name].append(out.stats["ms_per_token"]); passes[name].append(out.stats["target_passes"])
    print(r, {k:(v[-1], passes[k][-1]) for k,v in res.items()}, flush=True)
for k,v in res.items(): print(k, "median ms/token %.3f mean %.3f  target passes mean %.1f" % (statistics.median(v), statistics.mean(v), statistics.mean(passes[k])))
