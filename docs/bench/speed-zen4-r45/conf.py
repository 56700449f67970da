"""Teacher-forced: does the middle level's own confidence predict the target's acceptance?
python conf.py CONTEXT [new_tokens] -> per position acceptance (greedy match; sum min(p,q) at T=0.6)
and the middle's max q; saved to conf_CONTEXT.pt (sim.py reads it)"""
import sys, argparse, dataclasses, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
S=int(sys.argv[1]); NEW=int(sys.argv[2]) if len(sys.argv)>2 else 256
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","lower","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=base_run(args, mode="ar", temperature=0.0); engine=Engine(run, keep_prefill=True)
model=lower_level_copy(engine.model, "int4", head=None)
out={}
with torch.inference_mode():
  for off in (0, 1):   # two windows of the corpus: the first S tokens, and S tokens further on
    ids_all=prompt_ids(engine,args,S*(off+1)) if off else prompt_ids(engine,args,S)
    ids=ids_all[-S:]
    for temp in (0.0, 0.6):
        params=SamplingParams(temperature=temp, top_p=args.top_p)
        req=dataclasses.replace(run, temperature=temp, max_new_tokens=NEW)
        target, seq, tl = teacher_forced(engine, req, ids)
        ml, budget = middle_logits(engine, req, model, target, ids, seq)
        pp=probs_from_logits(tl, params); q=probs_from_logits(ml, params)
        acc = (ml.argmax(-1)==tl.argmax(-1)).float() if temp==0 else torch.minimum(pp,q).sum(-1)
        qmax = q.max(-1).values if temp > 0 else torch.softmax(ml.float(), -1).max(-1).values
        ent = -(q.clamp_min(1e-12).log()*q).sum(-1)
        out[(off,temp)] = dict(acc=acc, qmax=qmax, ent=ent, budget=budget)
        print(f"S={S} window {off} T={temp}: n={len(acc)} mean acceptance {acc.mean():.3f} budget {budget}", flush=True)
        for lo,hi in ((0,0.3),(0.3,0.5),(0.5,0.7),(0.7,0.9),(0.9,0.99),(0.99,1.01)):
            sel=(qmax>=lo)&(qmax<hi)
            if sel.any(): print(f"   max q in [{lo},{hi}): {int(sel.sum()):4d} positions, acceptance {acc[sel].mean():.3f}")
torch.save(out, f"conf_{S}.pt")
