"""Scratch: is the `against` harness's 0.92 at T = 8 for identical source an order effect?"""
import statistics, tempfile, torch
from torch.utils import cpp_extension
from triforce.runtime.native import CSRC, attention_cpu
from triforce.runtime.bench.measure import interleaved, timed
torch.set_num_threads(2)
a = cpp_extension.load(name="tf_order_a", sources=["/tmp/r15/HEADK.cpp"], build_directory=tempfile.mkdtemp(),
                       extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
inst = attention_cpu()
S = 32000
layers = [(torch.randn(1, 3, S, 64).bfloat16(), torch.randn(1, 3, S, 64).bfloat16()) for _ in range(30)]
q = torch.randn(1, 9, 8, 64).bfloat16()
for order in (("built", "installed"), ("installed", "built")):
    mods = {"built": a, "installed": inst}
    fns = {n: timed(lambda m=mods[n]: [m.attend(q, k, v, 0.125) for k, v in layers]) for n in order}
    t = {k: statistics.median(v) * 1e3 for k, v in interleaved(fns, 11).items()}
    print("order", order, {k: round(v, 2) for k, v in t.items()})
