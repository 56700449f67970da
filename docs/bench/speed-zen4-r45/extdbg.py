import sys, argparse, dataclasses, statistics, torch, collections
from common import triforce_request
from triforce.runtime import gamma as G, speculate as SP
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3])
args, eng, run, ids = triforce_request(S, T, NEW)
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
