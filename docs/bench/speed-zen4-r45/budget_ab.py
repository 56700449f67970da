"""The retrieval budget with extension on, in one process: python budget_ab.py S T NEW ROUNDS BUDGET[,BUDGET...]"""
import sys, argparse, dataclasses, statistics, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3]); R=int(sys.argv[4]); budgets=[int(b) for b in sys.argv[5].split(",")]
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","modes","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays","--new-tokens",str(NEW),"--gamma","auto"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=dataclasses.replace(base_run(args, mode="triforce", temperature=T), max_new_tokens=NEW)
eng=Engine(run, keep_prefill=True); ids=prompt_ids(eng,args,S)
res={b:[] for b in budgets}; info={b:[] for b in budgets}
for b in budgets: eng.generate(ids, dataclasses.replace(run, retrieval_budget=b))
for r in range(R):
    for b in budgets:
        out=eng.generate(ids, dataclasses.replace(run, retrieval_budget=b, seed=r))
        st=out.stats; t=st["levels"]["target"]
        res[b].append(st["ms_per_token"]); info[b].append((st["target_passes"], round(t["accepted"]/max(1,t["drafted"]),3), t["extended"]))
    print(r, {b:(res[b][-1], info[b][-1]) for b in budgets}, flush=True)
for b in budgets: print(b, "median ms/token %.3f" % statistics.median(res[b]), info[b])
