"""linear_packed on prefill-sized inputs, base against the XP_22 switch (per call, alternating): ms and GFLOP/s"""
import os, statistics, sys, torch
import time
from triforce.runtime import native
from triforce.runtime.ops import pack
torch.manual_seed(0); torch.set_num_threads(2)
k = native.layer_cpu()
shapes = [("qkv", 960, 576), ("o", 576, 576), ("gate_up", 3072, 576), ("down", 576, 1536), ("head", 49152, 576)]
N, reps = int(sys.argv[1]), int(sys.argv[2])
tot = {"base": 0, "XP_22": 0}
for name, O, K in shapes:
    w = (torch.randn(O, K) * 0.05).bfloat16(); p = pack(w); x = torch.randn(N, K).bfloat16()
    ts = {"base": [], "XP_22": []}; outs = {}
    for r in range(reps):
        for m in (("base", "XP_22") if r % 2 == 0 else ("XP_22", "base")):
            if m == "XP_22": os.environ["XP_22"] = "1"
            else: os.environ.pop("XP_22", None)
            t = time.perf_counter(); y = k.linear_packed(x, p, None, O); ts[m].append(time.perf_counter() - t); outs[m] = y
    a, b = statistics.median(ts["base"]), statistics.median(ts["XP_22"]); f = 2 * N * O * K
    if name != "head": tot["base"] += a; tot["XP_22"] += b
    print(f"{name:8s} N={N} O={O} K={K}: base {a*1e3:7.2f} ms {f/a/1e9:6.0f} GF/s  2x2 {b*1e3:7.2f} ms {f/b/1e9:6.0f} GF/s  ({b/a:.3f}) same {torch.equal(outs['base'], outs['XP_22'])}", flush=True)
print(f"decoder layer linears: base {tot['base']*1e3:.2f} ms, 2x2 {tot['XP_22']*1e3:.2f} ms ({tot['XP_22']/tot['base']:.3f})")
