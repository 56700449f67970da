import sys, statistics, time, argparse, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime.model import decoder_plan
torch.set_num_threads(2)
ap = argparse.ArgumentParser(); sub = ap.add_subparsers(dest="command")
from triforce.runtime.bench import add_bench_parser
add_bench_parser(sub)
S = int(sys.argv[1])
args = ap.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                      "--budget", "1024", "--middle-weights", "int4", "--rope-scaling", "yarn:4", "--contexts", str(S)])
flush = torch.ones(768 * 2**20 // 4)
torch.inference_mode().__enter__()
run = base_run(args, mode="triforce", temperature=0.0)
engine = Engine(run)
ids = prompt_ids(engine, args, S + 9)
lv = built_levels(engine, run, ids, S)
def parts(name, T):
    level = lv[name]; m = level.model; cache = level.cache; plan = decoder_plan(m); n = cache.get_seq_length()
    x = torch.tensor([ids[S - T + 1:S + 1]]); h = m.model.embed_tokens(x)
    def whole(): m(x, cache); cache.crop(n)
    def planned():
        cos, sin = cache.begin(T); plan.run(h, cos, sin, *cache.slots()); cache.end(); cache.crop(n)
    def head(): m.lm_head(m.model.norm(h)).float()
    return dict(whole=whole, plan=planned, head=head)
def tm(f):
    t = time.perf_counter(); f(); return (time.perf_counter() - t) * 1e3
for name in sys.argv[2].split(","):
    for T in [int(t) for t in sys.argv[3].split(",")]:
        p = parts(name, T)
        res = {f"{k}_{c}": [] for k in p for c in ("cold", "warm")}
        for rep in range(9):
            for k, f in p.items():
                flush.sum(); res[f"{k}_cold"].append(tm(f))
                for _ in range(3): f()
                res[f"{k}_warm"].append(tm(f))
        print(name, T, "  ".join(f"{k} {statistics.median(v):.2f}" for k, v in res.items()), flush=True)
