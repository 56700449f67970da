"""A/B of draft extension (speculate.Extension) in one process: python extab.py S T NEW ROUNDS"""
import sys, argparse, dataclasses, statistics, torch
from common import triforce_request
from triforce.runtime.bench.suites import base_run
from triforce.runtime import gamma as G
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3]); R=int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
arrun=base_run(args, mode="ar", temperature=T); arrun=dataclasses.replace(arrun, max_new_tokens=NEW)
orig=G.GammaTuner.extension
res={"ar":[], "off":[], "on":[]}; info={"off":[], "on":[]}
eng.generate(ids, run); eng.generate(ids, arrun)
for r in range(R):
    for name in ("ar","off","on"):
        if name=="ar":
            out=eng.generate(ids, arrun); res[name].append(out.stats["ms_per_token"]); continue
        G.GammaTuner.extension = orig if name=="on" else (lambda self: None)
        out=eng.generate(dataclasses.replace(ids) if False else ids, dataclasses.replace(run, seed=r))
        st=out.stats; t=st["levels"]["target"]
        res[name].append(st["ms_per_token"])
        info[name].append((st["tokens_per_target_pass"], st["target_passes"], t["extended"], t["extended_accepted"], t["sure"], t["sure_accepted"], len(out.token_ids), st["gamma"]["rounds_per_choice"]))
        print(name, r, st["ms_per_token"], info[name][-1], flush=True)
for k,v in res.items(): print(k, "median ms/token", statistics.median(v), v)
print("x ar: off", statistics.median(res["ar"])/statistics.median(res["off"]), "on", statistics.median(res["ar"])/statistics.median(res["on"]))
