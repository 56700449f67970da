import os
import sys, os, time, statistics
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r44", "midprof.py")).read().split("print(f\"S={S} T={T}")[0].replace("for _ in range(5): mid.model","for _ in range(1): mid.model").replace("dur = float(sys.argv[4]) if len(sys.argv)>4 else 8","dur=0.5"))
from triforce.runtime.model import decoder_plan
m=mid.model; c=mid.cache; plan=decoder_plan(m)
flush=torch.ones(64*2**20)  # 256 MB
other=torch.ones(14*2**20)  # 56 MB
with torch.inference_mode():
  cos,sin=c.begin(T); xe=m.model.embed_tokens(x); slots=c.slots(); c.end(); c.crop(n)
  h=torch.randn(1,T,576).bfloat16()
  res={k:[] for k in ("head repeated","head after 256MB read","head after 56MB read","head after plan.run","plan.run","read 56MB")}
  for r in range(60):
    t=time.perf_counter(); m.head(h); res["head repeated"].append(time.perf_counter()-t)
    flush.sum(); t=time.perf_counter(); m.head(h); res["head after 256MB read"].append(time.perf_counter()-t)
    t=time.perf_counter(); other.sum(); res["read 56MB"].append(time.perf_counter()-t)
    t=time.perf_counter(); m.head(h); res["head after 56MB read"].append(time.perf_counter()-t)
    t=time.perf_counter(); y=plan.run(xe,cos,sin,*slots); t1=time.perf_counter(); m.head(y); t2=time.perf_counter()
    res["plan.run"].append(t1-t); res["head after plan.run"].append(t2-t1)
  for k,v in res.items(): print(f"{k:24s} {statistics.median(v)*1e3:.3f} ms")
