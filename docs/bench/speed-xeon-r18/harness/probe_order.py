# Scratch, round 18 (run from the repository root):
#   python docs/bench/speed-xeon-r18/harness/probe_order.py 32000 order   target passes in the probe's order, three times
#   python docs/bench/speed-xeon-r18/harness/probe_order.py 32000 probe   gamma.probe_pass_costs twice (ms after non_decreasing)
import os, sys, time, torch
sys.path.insert(0, os.path.dirname(__file__))
from levels import levels_at
from triforce.runtime.gamma import probe_pass_costs
S = int(sys.argv[1])
torch.inference_mode().__enter__()
ids, lv = levels_at(S)
if sys.argv[2] == "order":
    level = lv["target"]; n = level.cache.get_seq_length()
    for rep in range(3):
        out = []
        for T in (1, 1, 2, 4, 5, 6, 8, 12, 13):
            x = torch.zeros(1, T, dtype=torch.long)
            t = time.perf_counter(); level.model(x, level.cache); out.append(f"{T}:{(time.perf_counter() - t) * 1e3:.1f}"); level.cache.crop(n)
        print("sequence", rep, " ".join(out), flush=True)
else:
    for rep in range(2):
        t = time.perf_counter(); costs = probe_pass_costs([lv["drafter"], lv["retrieval"], lv["target"]], (4, 12), 128)
        print(f"probe {rep}: {time.perf_counter() - t:.2f} s", "target", {T: round(s * 1e3, 1) for T, s in costs[2].points},
              "middle", {T: round(s * 1e3, 1) for T, s in costs[1].points}, flush=True)
