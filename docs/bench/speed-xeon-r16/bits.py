import os, sys, tempfile, torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC, attention_cpu
torch.set_num_threads(2)
old = cpp_extension.load(name="tf_att_old_bits", sources=[os.path.abspath(sys.argv[1])], build_directory=tempfile.mkdtemp(),
    extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
new = attention_cpu()
bad = 0
for S in (17, 64, 100, 700, 1025, 1500, 5000):
    for T in range(1, min(S, 33)):
        for G in (1, 3, 4):
            q = torch.randn(1, 3 * G, T, 64).bfloat16(); k = torch.randn(1, 3, S, 64).bfloat16(); v = torch.randn(1, 3, S, 64).bfloat16()
            a, b = old.attend(q, k, v, 0.125), new.attend(q, k, v, 0.125)
            if not torch.equal(a, b):
                bad += 1; print("differs", S, T, G, (a.float() - b.float()).abs().max().item())
print("differing cases:", bad)
