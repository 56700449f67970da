"""Teacher-forced at T = 0.6 (top-p 0.9): the target's acceptance sum min(p, q) when the middle level
draws its drafts at another temperature / top-p than the target's. python dtemp.py S NEW WINDOWS"""
import sys, argparse, dataclasses, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
S=int(sys.argv[1]); NEW=int(sys.argv[2]); W=int(sys.argv[3]); TEMP=float(sys.argv[4]) if len(sys.argv)>4 else 0.6
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","lower","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=base_run(args, mode="ar", temperature=0.0); engine=Engine(run, keep_prefill=True)
model=lower_level_copy(engine.model, "int4", head=None)
params=SamplingParams(temperature=TEMP, top_p=args.top_p)
grid=[(t, tp) for t in (0.3, 0.4, 0.5, 0.55, 0.6, 0.7) for tp in (0.8, 0.9, 1.0)]
tot={g: [] for g in grid}
with torch.inference_mode():
  for w in range(W):
    ids=prompt_ids(engine,args,S*(w+1))[-S:]
    req=dataclasses.replace(run, temperature=TEMP, max_new_tokens=NEW, seed=1000+w)
    target, seq, tl = teacher_forced(engine, req, ids)
    ml, budget = middle_logits(engine, req, model, target, ids, seq)
    pp=probs_from_logits(tl, params)
    line=[]
    for g in grid:
        q=probs_from_logits(ml, SamplingParams(temperature=g[0], top_p=g[1]))
        a=torch.minimum(pp,q).sum(-1); tot[g].append(a)
        line.append(f"{g[0]}/{g[1]}:{a.mean():.3f}")
    print(f"S={S} window {w} n={len(a)} budget {budget}: "+" ".join(line), flush=True)
print("pooled:")
for g in grid:
    a=torch.cat(tot[g]); print(f"  draft T {g[0]} top-p {g[1]}: {a.mean():.4f}")
