"""cProfile of one triforce (or ar) request's decode at S tokens of essays (after a warm-up request)."""
import sys, argparse, cProfile, pstats, time, torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
S, mode, T = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
parser = argparse.ArgumentParser(); sub = parser.add_subparsers(dest="command"); add_bench_parser(sub)
args = parser.parse_args(["bench", "--suite", "modes", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                          "--corpus", "essays", "--new-tokens", "128", "--gamma", "auto"])
torch.set_num_threads(2)
run = base_run(args, mode=mode, temperature=T)
engine = Engine(run, keep_prefill=True)
ids = prompt_ids(engine, args, S)
engine.generate(ids, run)     # warm-up (prefill kept)
t = time.perf_counter(); r = engine.generate(ids, run); print("plain", r.stats["ms_per_token"], "ms/token", r.stats.get("levels", {}).keys())
prof = cProfile.Profile(); prof.enable(); r = engine.generate(ids, run); prof.disable()
print("profiled", r.stats["ms_per_token"], "ms/token")
pstats.Stats(prof).sort_stats("tottime").print_stats(25)
