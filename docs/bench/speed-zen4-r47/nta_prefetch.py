"""Middle-level passes with the int4 weights prefetched T0 (now) or NTA, 3 after each target pass (as in a request),
30 rounds interleaved: python nta_prefetch.py S"""
import sys, os, time, statistics, shutil, tempfile, pathlib
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request, swapped_plan
import torch
from triforce.runtime import native
from triforce.runtime.gamma import pass_seconds
from torch.utils import cpp_extension
S = int(sys.argv[1])
args, eng, run, ids = triforce_request(S, 0.0, 64)
stack, _ = eng.build_stack(run, len(ids) + 80)
eng.prefill(stack, ids, None)
mid, target = stack[1], stack[-1]
src = (pathlib.Path(__file__).resolve().parents[3] / "runtime" / "csrc" / "quant_cpu.cpp").read_text()
d = pathlib.Path(tempfile.mkdtemp()); [shutil.copy(h, d) for h in pathlib.Path(__file__).resolve().parents[3] / "runtime" / "csrc".glob("*.h")]
(d / "quant_cpu.cpp").write_text(src.replace("  else\n    _mm_prefetch((const char*)p, _MM_HINT_T0);", "  else\n    _mm_prefetch((const char*)p, _MM_HINT_NTA);", 1))
assert "_MM_HINT_NTA" in (d / "quant_cpu.cpp").read_text()
nta = cpp_extension.load(name="quant_nta", sources=[str(d / "quant_cpu.cpp")], build_directory=str(d),
                         extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{d}"], extra_ldflags=["-fopenmp"])
n = len(mid.cached)
x = torch.zeros(1, 1, dtype=torch.long)
plans = {"T0": swapped_plan(mid, 1, x, n, 2, native.quant_cpu()), "NTA": swapped_plan(mid, 1, x, n, 2, nta)}
res = {(k, i): [] for k in plans for i in range(3)}
with torch.inference_mode():
    for rep in range(30):
        for name, (plan, a) in plans.items():
            pass_seconds(target, 3)
            for i in range(3):
                t = time.perf_counter(); plan.run(*a); res[(name, i)].append(time.perf_counter() - t)
for (k, i), v in res.items(): print(k, "middle pass", i + 1, "after a target pass: %.3f ms" % (1e3 * statistics.median(v)))
