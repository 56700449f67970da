"""DecoderPlan.run_packed with each sequence's query/cos/sin views made once per pass (after) against
once per layer (before): builds of layer_cpu.cpp swapped in as the plan's module, a packed pass of B
sequences' T tokens on the int4 middle level (bf16, retrieval caches over CONTEXT-token prompts) and on
the target, interleaved, outputs asserted equal. python ab_packed_views.py CONTEXT B T REPS BEFORE AFTER"""
import argparse, statistics, sys, tempfile, time
from pathlib import Path
import torch
from torch.utils import cpp_extension
from triforce.runtime import model as model_mod, native
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.cache_packed import PackedCache
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.native import CSRC
context, B, T, reps = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(2)
mods = {}
for name, src in (("before", sys.argv[5]), ("after", sys.argv[6])):
    d = Path(tempfile.mkdtemp()); f = d / "layer.cpp"; f.write_text(Path(src).read_text())
    mods[name] = cpp_extension.load(name=f"tf_pv_{name}", sources=[str(f)], build_directory=str(d),
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
run = RunConfig(mode="triforce", dtype="bf16", retrieval_budget=1024, middle_weights="int4", draft_weights="int4")
engine = Engine(run)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), B * context)
stacks = []
for b in range(B):
    stack, _ = engine.build_stack(run, context + 64)
    engine.prefill(stack, ids[b * context:(b + 1) * context], None)
    stacks.append(stack)
own = native.layer_cpu
for level in (1, 2):   # the middle level, the target
    model = stacks[0][level].model
    plans = {}
    for name, m in mods.items():
        native.layer_cpu = lambda m=m: m
        plans[name] = model_mod._build_plan(model)
    native.layer_cpu = own
    caches = [s[level].cache for s in stacks]
    lengths = [c.get_seq_length() for c in caches]
    x = torch.tensor([ids[:B * T]])
    def one(name):
        model_mod._PLANS[model] = plans[name]
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model(x, PackedCache(caches, [T] * B), last_only=False)
        s = time.perf_counter() - t0
        for c, n in zip(caches, lengths):
            c.crop(n)
        return out, s
    ref = one("before")[0]
    assert torch.equal(one("after")[0], ref)
    ts = {n: [] for n in mods}
    for rep in range(reps):
        for n in (mods if rep % 2 else reversed(list(mods))):
            ts[n].append(one(n)[1])
    print(f"{['', 'middle (int4)', 'target'][level]} B={B} T={T}: " + "  ".join(
        f"{n} median {statistics.median(v)*1e3:.3f} min {min(v)*1e3:.3f} ms" for n, v in ts.items())
        + f"; after faster in {sum(a < b for a, b in zip(ts['after'], ts['before']))}/{reps}", flush=True)
