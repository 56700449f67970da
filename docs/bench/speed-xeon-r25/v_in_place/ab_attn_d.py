"""Attention alone, L layers of random K/V streamed, two builds interleaved: any head shape.
usage: ab_attn_d.py DIR1,DIR2 S H HKV D T,T,... [LAYERS]"""
import os, sys, time, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "speed-xeon-r22", "spread"))
from load import load
torch.set_num_threads(2)
dirs = sys.argv[1].split(","); names = [os.path.basename(d.rstrip("/")) for d in dirs]
S, H, Hkv, D = (int(x) for x in sys.argv[2:6]); Ts = [int(t) for t in sys.argv[6].split(",")]
L = int(sys.argv[7]) if len(sys.argv) > 7 else 8
mods = {n: load(d, n + "_d") for n, d in zip(names, dirs)}
cap = S + 64
ks = [torch.randn(1, Hkv, cap, D).bfloat16() for _ in range(L)]
vs = [torch.randn(1, Hkv, cap, D).bfloat16() for _ in range(L)]
for T in Ts:
    q = torch.randn(1, H, T, D).bfloat16()
    ref = mods[names[0]].attend(q, ks[0][:, :, :S], vs[0][:, :, :S], D ** -0.5).float()
    res = {n: [] for n in names}
    for rep in range(9):
        for n in (names if rep % 2 else names[::-1]):
            t0 = time.perf_counter()
            for i in range(L):
                mods[n].attend(q, ks[i][:, :, :S], vs[i][:, :, :S], D ** -0.5)
            res[n].append(time.perf_counter() - t0)
    err = {n: (mods[n].attend(q, ks[0][:, :, :S], vs[0][:, :, :S], D ** -0.5).float() - ref).abs().max().item() for n in names}
    print(f"S={S} H={H} Hkv={Hkv} D={D} T={T}: " + "  ".join(f"{n} {sorted(res[n])[4]*1e3:7.2f}ms (min {min(res[n])*1e3:7.2f}) diff {err[n]:.1e}" for n in names), flush=True)
