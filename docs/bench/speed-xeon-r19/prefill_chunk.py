# Round 19 (python docs/bench/speed-xeon-r19/prefill_chunk.py S[,S..] REPEATS name=@FILE ...): one prefill chunk (1,024 queries at the end of S keys, one layer, G = 3, 3 kv heads) for each built variant, interleaved
import importlib.util, statistics, sys
from pathlib import Path
import torch
from triforce.runtime.bench.measure import interleaved, timed
spec = importlib.util.spec_from_file_location("variants", "docs/bench/speed-xeon-r13/variants.py")
variants = importlib.util.module_from_spec(spec); spec.loader.exec_module(variants)
torch.set_num_threads(2)
S = [int(s) for s in sys.argv[1].split(",")]; reps = int(sys.argv[2]); T = 1024
mods = variants.build(sys.argv[3:], base=True, tag="r19p")
for s in S:
    k, v = torch.randn(1, 3, s, 64).bfloat16(), torch.randn(1, 3, s, 64).bfloat16()
    q = torch.randn(1, 9, T, 64).bfloat16()
    ref = mods["base"].attend(q, k, v, 0.125)
    for n, m in mods.items():
        out = m.attend(q, k, v, 0.125)
        if not torch.equal(out, ref): print(f"  {n}: differs from base (max {(out.float()-ref.float()).abs().max():.3g}, mean {(out.float()-ref.float()).abs().mean():.3g})")
    fns = {n: (lambda m=m: m.attend(q, k, v, 0.125)) for n, m in mods.items()}
    raw = interleaved({kk: timed(f) for kk, f in fns.items()}, reps)
    t = {kk: statistics.median(vv) * 1e3 for kk, vv in raw.items()}
    flops = 4 * 9 * T * (s - T / 2) * 64
    print(f"S={s} T={T}: " + "  ".join(f"{n} {v:.1f} ms ({flops / v / 1e6:.0f} GFLOP/s)" for n, v in t.items()), flush=True)
