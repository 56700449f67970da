"""The retrieval budget with extension on, in one process: python budget_ab.py S T NEW ROUNDS BUDGET[,BUDGET...]"""
import sys, argparse, dataclasses, statistics, torch
from common import triforce_request
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3]); R=int(sys.argv[4]); budgets=[int(b) for b in sys.argv[5].split(",")]
args, eng, run, ids = triforce_request(S, T, NEW)
res={b:[] for b in budgets}; info={b:[] for b in budgets}
for b in budgets: eng.generate(ids, dataclasses.replace(run, retrieval_budget=b))
for r in range(R):
    for b in budgets:
        out=eng.generate(ids, dataclasses.replace(run, retrieval_budget=b, seed=r))
        st=out.stats; t=st["levels"]["target"]
        res[b].append(st["ms_per_token"]); info[b].append((st["target_passes"], round(t["accepted"]/max(1,t["drafted"]),3), t["extended"]))
    print(r, {b:(res[b][-1], info[b][-1]) for b in budgets}, flush=True)
for b in budgets: print(b, "median ms/token %.3f" % statistics.median(res[b]), info[b])
