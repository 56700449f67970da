"""A level's T-token passes on two builds of layer_cpu.cpp (the decoder plan), interleaved in one process.
usage: OLD=path/to/old/layer_cpu.cpp [OLD_QUANT=path/to/old/quant_cpu.cpp] [OLD_ATTENTION=path/to/old/attention_cpu.cpp]
       python pass_ab.py S T level [rounds]
Without OLD: where the current build's pass goes (DecoderPlan.run, the head, the rest), over 400 passes.
(OLD_QUANT, OLD_ATTENTION: the old plan also takes its int8/int4 linears, its attention, from that build;
a plan calls them through function pointers, so pair each old layer_cpu.cpp with the sources of its commit)"""
import os, sys, time, argparse, statistics, torch
from torch.utils.cpp_extension import load
from triforce.runtime import native, model as M
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
S, T, level = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 12
def old_build(env: str, name: str):
    """The module built from the source $env names (None: unset), beside the current one."""
    if not os.environ.get(env):
        return None
    os.makedirs(f"/tmp/pass_ab_{name}", exist_ok=True)
    return load(name=name, sources=[os.environ[env]], extra_include_paths=[str(native.CSRC)], build_directory=f"/tmp/pass_ab_{name}",
                extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", "-w"], extra_ldflags=["-fopenmp"])


old = old_build("OLD", "layer_cpu_old")
old_quant, old_attention = old_build("OLD_QUANT", "quant_cpu_old"), old_build("OLD_ATTENTION", "attention_cpu_old")
parser = argparse.ArgumentParser(); sub = parser.add_subparsers(dest="command"); add_bench_parser(sub)
args = parser.parse_args(["bench", "--suite", "passes", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2", "--corpus", "essays", "--levels", "target"])
torch.set_num_threads(2)
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 1)
    lv = built_levels(engine, run, ids, S)[level]
    x = torch.tensor([ids[S - T + 1:S + 1]]); n = lv.cache.get_seq_length(); m = lv.model
    if old is None:   # where one pass goes: the decoder plan, the head (norm, lm_head, float), the rest
        import types
        plan, head, spent = M.decoder_plan(m), m.head, dict(plan=0.0, head=0.0)
        def timed(f, key):
            def call(*a, **k):
                t = time.perf_counter(); r = f(*a, **k); spent[key] += time.perf_counter() - t; return r
            return call
        for _ in range(3): m(x, lv.cache); lv.cache.crop(n)
        M._PLANS[m] = types.SimpleNamespace(run=timed(plan.run, "plan"), run_packed=plan.run_packed)
        m.head = timed(head, "head")
        t0 = time.perf_counter()
        for _ in range(400): m(x, lv.cache); lv.cache.crop(n)
        total = (time.perf_counter() - t0) / 400 * 1e3
        print(f"{level} S={S} T={T}: pass {total:.2f} ms; plan.run {spent['plan'] / 400 * 1e3:.2f}; head (norm, lm_head, float) "
              f"{spent['head'] / 400 * 1e3:.2f}; rest {total - (spent['plan'] + spent['head']) / 400 * 1e3:.2f}")
        sys.exit(0)
    new_plan = M._build_plan(m)
    real = native.layer_cpu, native.quant_cpu, native.attention_cpu
    native.layer_cpu = lambda: old
    if old_quant is not None:
        native.quant_cpu = lambda: old_quant
    if old_attention is not None:
        native.attention_cpu = lambda: old_attention
    old_plan = M._build_plan(m)
    native.layer_cpu, native.quant_cpu, native.attention_cpu = real
    plans = {"old": old_plan, "new": new_plan}
    outs = {}
    for name, plan in plans.items():
        M._PLANS[m] = plan
        outs[name] = m(x, lv.cache); lv.cache.crop(n)
    print("logits max |old - new|:", (outs["old"] - outs["new"]).abs().max().item())
    again = {}
    for name, plan in plans.items():
        M._PLANS[m] = plan
        again[name] = m(x, lv.cache); lv.cache.crop(n)
    print("same plan twice, max diff: old", (outs["old"] - again["old"]).abs().max().item(), "new", (outs["new"] - again["new"]).abs().max().item(),
          "| old vs new, second:", (again["old"] - again["new"]).abs().max().item())
    M._PLANS[m] = False
    torch_out = m(x, lv.cache); lv.cache.crop(n)
    print("module path (no plan) vs old", (torch_out - outs["old"]).abs().max().item(), "vs new", (torch_out - outs["new"]).abs().max().item(),
          "| argmax old/new/module", outs["old"][0, -1].argmax().item(), outs["new"][0, -1].argmax().item(), torch_out[0, -1].argmax().item())
    ts = {k: [] for k in plans}
    for r in range(rounds):
        for name, plan in plans.items():
            M._PLANS[m] = plan
            t0 = time.perf_counter()
            for _ in range(20): m(x, lv.cache); lv.cache.crop(n)
            ts[name].append((time.perf_counter() - t0) / 20 * 1e3)
    print(f"{level} S={S} T={T}: " + "  ".join(f"{k} median {statistics.median(v):.2f} ms (min {min(v):.2f})" for k, v in ts.items()))
