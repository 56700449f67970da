"""30 layers of attention, K/V streamed from memory, builds side by side and interleaved.
usage: ab_attn.py DIR1,DIR2,... S fp32|bf16 [T,T,...]  (each DIR holds an attention_cpu.cpp and its headers)"""
import os, sys, time, torch
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from load import load
torch.set_num_threads(2)
dirs = sys.argv[1].split(","); names = [os.path.basename(d.rstrip("/")) for d in dirs]
S = int(sys.argv[2]); dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[3]]
Ts = [int(t) for t in sys.argv[4].split(",")] if len(sys.argv) > 4 else [1, 4, 8]
mods = {n: load(d, n) for n, d in zip(names, dirs)}
L = 30; cap = S + 64
ks = [torch.randn(1, 3, cap, 64).to(dt) for _ in range(L)]
vs = [torch.randn(1, 3, cap, 64).to(dt) for _ in range(L)]
for T in Ts:
    q = torch.randn(1, 9, T, 64).to(dt)
    outs = {n: mods[n].attend(q, ks[0][:, :, :S], vs[0][:, :, :S], 0.125) for n in names}
    ref = outs[names[0]]
    res = {n: [] for n in names}
    for rep in range(9):
        for n in names:
            t0 = time.perf_counter()
            for i in range(L):
                mods[n].attend(q, ks[i][:, :, :S], vs[i][:, :, :S], 0.125)
            res[n].append(time.perf_counter() - t0)
    line = f"S={S} T={T}: " + "  ".join(f"{n} {sorted(res[n])[len(res[n])//2]*1e3:6.2f}ms(min {min(res[n])*1e3:6.2f}) same={torch.equal(outs[n], ref)}" for n in names)
    print(line, flush=True)
