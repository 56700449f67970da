import sys, torch
d=torch.load(sys.argv[1])
c1=float(sys.argv[2]); slope=float(sys.argv[3]); m=float(sys.argv[4])   # target pass c(T)=c1+slope*(T-1); middle ms per drafted token
def cost(T): return c1+slope*(T-1)
def run(acc, conf, policy):
    n=len(acc); i=0; ms=0.0; toks=0.0; passes=0
    # expected-value walk: at position i, draft k tokens by policy, expected emitted = sum prefix products + 1
    while i < n-12:
        k=policy(conf, i)
        ms += k*m + cost(k+1); passes+=1
        pr=1.0; e=0.0
        probs=[]
        for j in range(k):
            pr*=float(acc[i+j]); probs.append(pr)
        e=sum(probs)+1.0
        toks+=e
        i+=max(1,round(e))
    return ms/toks, toks/passes
def fixed(g): return lambda conf,i: g
def thresh(tau, cap, include=True):
    def f(conf,i):
        k=0
        while k<cap:
            k+=1
            if float(conf[i+k-1])<tau: return k if include else max(k-1,0) or 1
        return k
    return f
for key,v in d.items():
    acc,conf=v['acc'],v['qmax']
    best=None
    line=f"window {key[0]} T={key[1]} mean acc {acc.mean():.3f}:"
    for g in (1,2,3,4,6):
        r=run(acc,conf,fixed(g)); line+=f" g{g} {r[0]:.2f}"
    print(line)
    line="   confidence:"
    for tau in (0.5,0.8,0.9,0.95,0.99):
        for cap in (4,6,8):
            r=run(acc,conf,thresh(tau,cap)); line+=f" t{tau}/c{cap} {r[0]:.2f}({r[1]:.1f})"
    print(line)
print("--- extend policy: base g, then while conf >= tau up to cap")
def extend(g, tau, cap):
    def f(conf,i):
        k=g
        while k<cap and all(float(conf[i+j])>=tau for j in range(k)):   # every drafted token so far confident
            k+=1
        return k
    return f
def ext2(g, tau, cap):   # base g drafted; keep going while the LAST drafted token is confident
    def f(conf,i):
        k=g
        while k<cap and float(conf[i+k-1])>=tau: k+=1
        return k
    return f
for key,v in d.items():
    acc,conf=v['acc'],v['qmax']
    for lo,hi in ((0,0.5),(0.5,0.8),(0.8,0.9),(0.9,0.99),(0.99,1.01)):
        sel=(conf>=lo)&(conf<hi)
        if sel.any(): print(f"  {key}: conf [{lo},{hi}) {int(sel.sum())} acc {acc[sel].mean():.3f}")
    line=f"window {key[0]} T={key[1]}: g2 {run(acc,conf,fixed(2))[0]:.2f} g3 {run(acc,conf,fixed(3))[0]:.2f}"
    for tau in (0.8,0.9,0.95,0.99):
        for cap in (6,10):
            r=run(acc,conf,extend(2,tau,cap)); r2=run(acc,conf,ext2(2,tau,cap)); line+=f" e{tau}/{cap} {r[0]:.2f}/{r2[0]:.2f}"
    print(line)
