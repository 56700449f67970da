"""cProfile of one request after a warm-up, restricted to the runtime's Python: python prof2.py S MODE TEMPERATURE."""
import sys, argparse, cProfile, pstats, time, torch, io
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
engine.generate(ids, run)
r = engine.generate(ids, run); print("plain", r.stats["ms_per_token"], "ms/token")
prof = cProfile.Profile(); prof.enable(); r = engine.generate(ids, run); prof.disable()
print("profiled", r.stats["ms_per_token"], "ms/token")
st = pstats.Stats(prof)
# self time of everything except the native calls inside model.logits
st.sort_stats("cumtime").print_stats("runtime/(speculate|gamma|engine|decode|accept|sampling|cache|lookup|model)", 40)
