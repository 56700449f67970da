import sys, argparse, dataclasses, statistics, torch, collections
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime import gamma as G, speculate as SP
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3])
p=argparse.ArgumentParser(); sub=p.add_subparsers(dest="command"); add_bench_parser(sub)
args=p.parse_args(["bench","--suite","modes","--contexts",str(S),"--dtypes","bf16","--threads","2","--corpus","essays","--new-tokens",str(NEW),"--gamma","auto"]+(["--rope-scaling","yarn:4"] if S>8000 else []))
torch.set_num_threads(2)
run=dataclasses.replace(base_run(args, mode="triforce", temperature=T), max_new_tokens=NEW)
eng=Engine(run, keep_prefill=True); ids=prompt_ids(eng,args,S)
log=collections.Counter(); confs=[]
orig_more=SP.Extension.more
def more(self, base, drafted):
    if drafted < base: return False
    if drafted >= self.cap: log["cap"]+=1; return False
    c=self.seen[-1] if self.seen else 0; confs.append(c)
    if c < self.confidence: log["unsure"]+=1; return False
    ok=self.pays(self.seen, base, drafted)
    log["pays" if ok else "does not pay"]+=1
    return ok
SP.Extension.more=more
eng.generate(ids, run)
log.clear(); confs.clear()
out=eng.generate(ids, run)
print(dict(log)); import statistics as st
print("confidence quantiles", [round(x,3) for x in st.quantiles(confs, n=10)] if len(confs)>10 else confs)
g=out.stats["gamma"]
print(out.stats["ms_per_token"], out.stats["tokens_per_target_pass"], g["extension"], g["rounds_per_choice"])
