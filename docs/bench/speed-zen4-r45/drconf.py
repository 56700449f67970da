"""How sure the drafter was of each token it offered the middle level, against whether it passed."""
import sys, argparse, dataclasses, torch, collections
from common import triforce_request
from triforce.runtime import speculate as SP
S=int(sys.argv[1]); T=float(sys.argv[2]); NEW=int(sys.argv[3])
args, eng, run, ids = triforce_request(S, T, NEW)
rec=[]
orig=SP.verify_round
def vr(stack, gammas, seq, k, generator, lookup=None, room=0, extend=None):
    before=stack[-1].stats.copied
    out=orig(stack, gammas, seq, k, generator, lookup, room, extend)
    if stack[-1].name=="retrieval" and k>=1 and stack[-1].stats.copied==before:
        confs=stack[0].confidences(1) if stack[0].last is not None else [None]
        rec.append((confs[0], len(out[0])-1 >= 1))
    return out
SP.verify_round=vr
for seed in range(3): eng.generate(ids, dataclasses.replace(run, seed=seed))
b=collections.defaultdict(lambda:[0,0])
for c,ok in rec:
    if c is None: continue
    key=min(int(c*10),9)/10
    b[key][0]+=1; b[key][1]+=ok
print(f"S={S} T={T}: {len(rec)} first drafter tokens")
for k in sorted(b): print(f"  drafter top prob [{k:.1f},{k+0.1:.1f}): {b[k][0]:4d} offered, first accepted {b[k][1]/b[k][0]:.2f}")
