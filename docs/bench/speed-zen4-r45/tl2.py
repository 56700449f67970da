"""The middle level's plan.run with an instrumented int4 kernel: where each int4 linear's time goes, in situ."""
import sys, os, time, statistics
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r44", "midprof.py")).read().split("print(f\"S={S} T={T}")[0].replace("for _ in range(5): mid.model","for _ in range(1): mid.model").replace("dur = float(sys.argv[4]) if len(sys.argv)>4 else 8","dur=0.5"))
from triforce.runtime.bench.kernels import build_beside
from common import swapped_plan
mod = build_beside(os.environ["SRC"], "qinst2")   # SRC: quant_cpu.cpp in a copy of runtime/csrc with timeline_runs.patch and timeline_quant.patch applied
plan, args = swapped_plan(mid, T, x, n, 2, mod)
with torch.inference_mode():
  for _ in range(20): plan.run(*args)
  ts=[]
  mod.tf_set(True)
  for _ in range(200):
    t=time.perf_counter(); plan.run(*args); ts.append(time.perf_counter()-t)
  v=mod.tf_get(); mod.tf_set(False)
calls=v[-1]; per=calls/4
print(f"plan.run median {statistics.median(ts)*1e3:.3f} ms; int4 calls {calls:.0f}")
names=["call->region","fork->t0","fork->t1","t0 1st unit","t1 1st unit","t0 work","t1 work","join","after","total"]
tot=0
for i,l in enumerate(["qkv","o","gate_up","down"]):
    row=[v[10*i+j]/per/2.596e3 for j in range(10)]; tot+=row[9]*30
    print(f"{l:8s}: "+", ".join(f"{nm} {x:.2f}" for nm,x in zip(names,row))+" us")
print(f"int4 linears per pass {tot/1e3:.3f} ms")
