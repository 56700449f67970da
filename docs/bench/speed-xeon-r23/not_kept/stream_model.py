"""A model of the held AMX attention's memory schedule: 30 layers of bf16 K/V at 8K (3 kv heads), items of
1,024 keys, pass 1 reads K, pass 2 reads V, with a spin of C1 / C2 cycles per 64-key block standing in
for the compute; `streamed` reads every layer's own K/V, `resident` the first layer's 30 times (from L3).
sched: 0 the kernel's (pass 1 prefetches K 128 keys ahead and the block's V), 1 pass-ahead (pass 2
prefetches the next item's K), 2/7 one stream K, V, next K prefetched PFK keys ahead (7: spread over 16
sub-steps of the block's spin), 3 none, 4 one line per row, 5 K only, 6 one line per row, K then V ahead,
8 sched 0 spread over 16 sub-steps. usage: python stream_model.py"""
import os, tempfile, torch
from torch.utils import cpp_extension
m = cpp_extension.load(name="stream_model", sources=[os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_model.cpp")],
                       build_directory=tempfile.mkdtemp(), extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native"],
                       extra_ldflags=["-fopenmp"])
S = 8000; cap = S + 64
KB = torch.empty(30, 3, cap, 64, dtype=torch.bfloat16).normal_(); VB = torch.empty(30, 3, cap, 64, dtype=torch.bfloat16).normal_()
ks, vs = list(KB.unbind(0)), list(VB.unbind(0))
ks0, vs0 = [ks[0]] * 30, [vs[0]] * 30
for c1, c2 in [(0, 0), (600, 600), (1300, 2300)]:
    for sched, pfk in [(0, 128), (1, 128), (2, 128), (3, 0), (4, 128), (5, 128), (6, 128), (7, 128), (8, 128)]:
        ts = sorted(m.run(ks, vs, S, sched, pfk, c1, c2) for _ in range(7))
        tr = sorted(m.run(ks0, vs0, S, sched, pfk, c1, c2) for _ in range(5))
        print(f"compute {c1}/{c2} cycles per block, sched={sched} PFK={pfk}: streamed {ts[3]*1e3:.2f} ms  resident {tr[2]*1e3:.2f} ms", flush=True)
