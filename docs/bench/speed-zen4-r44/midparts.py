"""A level's pass split: forward, crop, plan.run, head, begin/end (after midprof.py's set-up; the same arguments)."""
import os as _os
exec(open(_os.path.join(_os.path.dirname(_os.path.abspath(__file__)), 'midprof.py')).read().split("from triforce.runtime.model import decoder_plan")[0].replace("print(f\"S={S}","pass #"))
from triforce.runtime.model import decoder_plan, plan_kernels
m=mid.model; c=mid.cache; plan=decoder_plan(m)
def tm(f, n=400):
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); f(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)*1e3
with torch.inference_mode():
  def fwd(): m(x,c)
  def crop(): c.crop(n)
  ts_f=[];ts_c=[]
  for _ in range(400):
    t=time.perf_counter(); m(x,c); t1=time.perf_counter(); c.crop(n); t2=time.perf_counter()
    ts_f.append(t1-t); ts_c.append(t2-t1)
  print(f"forward {statistics.median(ts_f)*1e3:.3f} crop {statistics.median(ts_c)*1e3:.3f}")
  cos,sin=c.begin(T); xe=m.model.embed_tokens(x); slots=c.slots(); c.end(); c.crop(n)
  h=torch.randn(1,T,576).bfloat16()
  print(f"plan.run {tm(lambda: plan.run(xe,cos,sin,*slots)):.3f}  head {tm(lambda: m.head(h)):.3f}  begin/end/crop {tm(lambda: (c.begin(T), c.end(), c.crop(n))):.3f}  decoder_plan {tm(lambda: decoder_plan(m)):.4f} plan_kernels {tm(lambda: plan_kernels()):.4f} slots {tm(lambda: c.slots()):.4f}")
  # plan.run followed by head, as in forward
  def seq():
    y=plan.run(xe,cos,sin,*slots); m.head(y)
  print(f"plan.run+head(on its output) {tm(seq):.3f}")
