"""Where the pieces of a middle-level (or any level: argv[3]) pass go at S = argv[1], T = argv[2]: plan.run, head,
1 against 2 threads, stage times, a cProfile; argv[4]: seconds of the first timing loop.
usage: python midprof.py S T [retrieval|drafter|target] [seconds]"""
import sys, time, argparse, statistics
import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
import argparse as _a
from triforce.runtime.bench import add_bench_parser
def build_parser():
    p=_a.ArgumentParser(); sub=p.add_subparsers(dest='command'); add_bench_parser(sub); return p
S=int(sys.argv[1]); T=int(sys.argv[2]) if len(sys.argv)>2 else 1
argv=["bench","--suite","passes","--dtypes","bf16","--threads","2","--contexts",str(S),"--corpus","essays"]+(["--rope-scaling","yarn:4"] if S>8000 else [])
args=build_parser().parse_args(argv)
args.dtype = "bf16"; print({k:v for k,v in vars(args).items() if "dtype" in k})
torch.set_num_threads(2)
run=base_run(args, mode="triforce", temperature=0.0); eng=Engine(run)
ids=prompt_ids(eng,args,S+2)
lv=built_levels(eng,run,ids,S)
mid=lv[sys.argv[3] if len(sys.argv)>3 else "retrieval"]
x=torch.tensor([ids[S-T+1:S+1]]); n=mid.cache.get_seq_length()
with torch.inference_mode():
  for _ in range(5): mid.model(x, mid.cache); mid.cache.crop(n)
  ts=[]
  t0=time.time()
  dur = float(sys.argv[4]) if len(sys.argv)>4 else 8
  while time.time()-t0 < dur:
    t=time.perf_counter(); mid.model(x, mid.cache); ts.append(time.perf_counter()-t); mid.cache.crop(n)
print(f"S={S} T={T}: median {statistics.median(ts)*1e3:.3f} ms over {len(ts)}")
from triforce.runtime.model import decoder_plan
m=mid.model; c=mid.cache; plan=decoder_plan(m)
def tm(f, n=300):
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
with torch.inference_mode():
  cos,sin=c.begin(T)
  xe=m.model.embed_tokens(x)
  slots=c.slots()
  c.end(); c.crop(n)
  def whole(): m(x,c); c.crop(n)
  def begin(): c.begin(T); c.end(); c.crop(n)
  def emb(): m.model.embed_tokens(x)
  def planrun(): plan.run(xe,cos,sin,*slots)
  h=torch.randn(1,T,576).bfloat16()
  def head(): m.head(h, False)
  def headlin(): m.lm_head(h)
  for name,f in [("whole",whole),("begin+end",begin),("embed",emb),("plan.run",planrun),("head",head),("lm_head only",headlin),("whole",whole)]:
    print(f"{name:14s} {tm(f):.3f} ms", flush=True)
  for th in (1,2):
    torch.set_num_threads(th)
    print(f"threads={th}: whole {tm(whole):.3f} plan.run {tm(planrun):.3f} head {tm(head):.3f}", flush=True)
  for th in (1,2,1,2):
    torch.set_num_threads(th)
    plan.set_timing(True)
    w=tm(planrun)
    st=plan.stage_seconds(); plan.set_timing(False)
    print(f"threads={th}: plan.run {w:.3f} ms; " + ", ".join(f"{k} {v*1e3:.3f}" for k,v in st), flush=True)
  torch.set_num_threads(2)
  import cProfile, pstats
  pr=cProfile.Profile(); pr.enable()
  for _ in range(300): whole()
  pr.disable()
  pstats.Stats(pr).sort_stats("tottime").print_stats(18)
