"""A level's plan.run with an instrumented attention kernel: where each attention call's time goes, in situ."""
import sys, os, time, statistics
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r44", "midprof.py")).read().split("print(f\"S={S} T={T}")[0].replace("for _ in range(5): mid.model","for _ in range(1): mid.model").replace("dur = float(sys.argv[4]) if len(sys.argv)>4 else 8","dur=0.5"))
from triforce.runtime.bench.kernels import build_beside
from common import swapped_plan
mod = build_beside(os.environ["SRC"], "ainst")   # SRC: attention_cpu.cpp in a copy of runtime/csrc with timeline_attention.patch applied
plan, args = swapped_plan(mid, T, x, n, 1, mod)
with torch.inference_mode():
  for _ in range(10): plan.run(*args)
  ts=[]
  mod.tfa_set(True)
  reps=int(os.environ.get("REPS","100"))
  for _ in range(reps):
    t=time.perf_counter(); plan.run(*args); ts.append(time.perf_counter()-t)
  v=mod.tfa_get(); mod.tfa_set(False)
calls=v[-1]
print(f"S={S} T={T} {sys.argv[3]}: plan.run median {statistics.median(ts)*1e3:.3f} ms; attention calls {calls:.0f} (slots {n})")
names=["call->region","fork t0","fork t1","items t0","items t1","n items t0","n items t1","barrier wait t0","barrier wait t1","merge t0","merge t1","region end->exit","total","last merge->region end"]
f=lambda i: v[i]/calls/(2.596e3 if i not in (5,6) else 1)
print("per call: " + ", ".join(f"{nm} {f(i):.2f}" for i,nm in enumerate(names)) + "  (us)")
print(f"attention per pass {v[12]/calls*30/2.596e6:.3f} ms; items t0+t1 per pass {(v[3]+v[4])/calls*30/2.596e6/2:.3f} ms (avg per thread)")
