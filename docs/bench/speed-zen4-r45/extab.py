"""A/B of draft extension (speculate.Extension) in one process: python extab.py S T NEW ROUNDS"""
import sys, argparse, dataclasses, statistics, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime import gamma as G
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3]); R=int(sys.argv[4])
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","modes","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays","--new-tokens",str(NEW),"--gamma","auto"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=base_run(args, mode="triforce", temperature=T); run=dataclasses.replace(run, max_new_tokens=NEW)
arrun=base_run(args, mode="ar", temperature=T); arrun=dataclasses.replace(arrun, max_new_tokens=NEW)
eng=Engine(run, keep_prefill=True); ids=prompt_ids(eng,args,S)
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
