"""In-process A/B of whole target passes: the decoder plan built with another attention build
(OLD.cpp) against this one, alternating, on the passes suite's levels."""
import argparse, os, statistics, sys, tempfile, time
import torch
from torch.utils import cpp_extension
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime import model as M
from triforce.runtime.native import CSRC
from triforce.runtime import native as NATIVE
from triforce.runtime.probes import read_bandwidth_gbs

def parse(argv):
    p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command")
    from triforce.runtime.bench import add_bench_parser
    add_bench_parser(sub)
    return p.parse_args(argv)
old_src, contexts, Ts, reps = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], [int(t) for t in sys.argv[3].split(",")], int(sys.argv[4])
levels_wanted = sys.argv[5].split(",") if len(sys.argv) > 5 else ["target"]
torch.set_num_threads(2)
old = cpp_extension.load(name="passab_old", sources=[os.path.abspath(old_src)], build_directory=tempfile.mkdtemp(),
    extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"], extra_ldflags=["-fopenmp"])
args = parse(["bench", "--suite", "passes", "--contexts", *map(str, contexts), "--threads", "2", "--dtypes", "bf16", "--corpus", "essays",
              "--rope-scaling", "yarn:4", "--budget", "1024", "--middle-weights", "int4"])
print(f"read bandwidth {read_bandwidth_gbs():.1f} GB/s", flush=True)
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, max(contexts) + 20)
    for S in contexts:
        levels = built_levels(engine, run, ids, S)
        for name in levels_wanted:
            lvl = levels[name]; model, cache = lvl.model, lvl.cache
            new_plan = M.decoder_plan(model)
            M._PLANS[model] = False
            real_attention = NATIVE.attention_cpu
            NATIVE.attention_cpu = lambda: old
            old_plan = M.decoder_plan(model)
            NATIVE.attention_cpu = real_attention
            plans = {"old": old_plan, "new": new_plan}
            for T in Ts:
                x = torch.tensor([ids[S - T + 1:S + 1]]); n0 = cache.get_seq_length()
                ts = {k: [] for k in plans}
                for r in range(reps + 2):
                    for k, p in plans.items():
                        M._PLANS[model] = p
                        t = time.perf_counter(); model(x, cache); dt = time.perf_counter() - t
                        cache.crop(n0)
                        if r >= 2: ts[k].append(dt)
                med = {k: 1000 * statistics.median(v) for k, v in ts.items()}
                print(f"{name} S={S} T={T}: old {med['old']:.2f} ms  new {med['new']:.2f} ms  ratio {med['old'] / med['new']:.3f}", flush=True)
            M._PLANS[model] = new_plan
        del levels
