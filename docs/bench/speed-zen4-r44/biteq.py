"""The packed linears of this build against the old source (argv[1]): outputs torch.equal for N = 1..20, bf16 and fp32, odd O."""
import sys, os
import triforce.runtime   # first: its allocator settings (huge pages) apply before torch allocates
import torch
from triforce.runtime.bench.kernels import build_beside
from triforce.runtime.native import layer_cpu
from triforce.runtime.ops import PackedLinear
new = layer_cpu()
old = build_beside(sys.argv[1], "lab_old")
torch.manual_seed(0); bad = 0; n = 0
for th in (1, 2):
    torch.set_num_threads(th)
    for dt in (torch.bfloat16, torch.float32):
        for o, k, bias in ((960, 576, False), (200, 64, True), (49152, 576, False), (576, 1536, True), (17, 96, True)):
            lin = torch.nn.Linear(k, o, bias=bias, dtype=dt); m = PackedLinear(lin)
            for N in range(1, 21):
                x = torch.randn(N, k, dtype=dt)
                b = lin.bias.detach().float() if bias else None
                a = new.linear_packed(x, m.packed, b, o); c = old.linear_packed(x, m.packed, b, o)
                n += 1; bad += not torch.equal(a, c)
print(f"{n} cases, {bad} differ")
