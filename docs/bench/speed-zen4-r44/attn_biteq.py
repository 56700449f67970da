"""This attention build against another attention_cpu.cpp (argv[1]): outputs torch.equal over S, T, G, dtypes."""
import sys, os
import triforce.runtime   # first: its allocator settings apply before torch allocates
import torch
from triforce.runtime.bench.kernels import build_beside
from triforce.runtime.native import attention_cpu
new, old = attention_cpu(), build_beside(sys.argv[1], "triforce_attention_biteq")
torch.manual_seed(0); n = bad = 0
for th in (1, 2):
    torch.set_num_threads(th)
    for dt in (torch.bfloat16, torch.float32, torch.float16):
        for S in (1, 17, 511, 1024, 2184, 7000):
            for T in (1, 2, 3, 5, 9, 16):
                if T > S: continue
                for Hkv, G in ((3, 3), (1, 4), (2, 1)):
                    q = torch.randn(1, Hkv * G, T, 64, dtype=dt); k = torch.randn(1, Hkv, S, 64, dtype=dt); v = torch.randn(1, Hkv, S, 64, dtype=dt)
                    n += 1; bad += not torch.equal(new.attend(q, k, v, 0.125), old.attend(q, k, v, 0.125))
print(f"{n} cases, {bad} differ")
