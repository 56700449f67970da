"""Teacher-forced: the middle level's head restricted to the prompt's own token ids (plus the
special ones): coverage of the target's tokens, greedy agreement and expected acceptance against
the full head. python pvocab.py S NEW WINDOWS"""
import sys, argparse, dataclasses, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
S=int(sys.argv[1]); NEW=int(sys.argv[2]); W=int(sys.argv[3])
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","lower","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=base_run(args, mode="ar", temperature=0.0); engine=Engine(run, keep_prefill=True)
model=lower_level_copy(engine.model, "int4", head=None)
special=list(engine.tokenizer.all_special_ids)+list(engine.cfg.eos_token_ids)
with torch.inference_mode():
  for w in range(W):
    ids=prompt_ids(engine,args,S*(w+1))[-S:]
    kept=torch.tensor(sorted(set(ids)|set(special)))
    for temp in (0.0, 0.6):
        params=SamplingParams(temperature=temp, top_p=args.top_p)
        req=dataclasses.replace(run, temperature=temp, max_new_tokens=NEW, seed=w)
        target, seq, tl = teacher_forced(engine, req, ids)
        ml, budget = middle_logits(engine, req, model, target, ids, seq)
        mask=torch.full_like(ml, float("-inf")); mask[:, kept]=0
        mp=ml.float()+mask
        cont=torch.tensor(seq[len(ids):])
        cover=torch.isin(cont, kept).float().mean()
        pp=probs_from_logits(tl, params)
        res=[]
        for name, l in (("full", ml), ("prompt", mp)):
            q=probs_from_logits(l, params)
            agree=(l.argmax(-1)==tl.argmax(-1)).float().mean(); acc=torch.minimum(pp,q).sum(-1).mean()
            res.append(f"{name}: agree {agree:.3f} accept {acc:.3f}")
        print(f"S={S} w={w} T={temp} kept {len(kept)} coverage of continuation {cover:.3f} | "+" | ".join(res), flush=True)
