# Scratch harness, round 17 (run from the repository root):
#   python docs/bench/speed-xeon-r17/split_harness.py 8000 retrieval,target 1,2,4,8
#     one level pass split into: the whole pass, the decoder plan alone, norm + head alone (medians)
#   python docs/bench/speed-xeon-r17/split_harness.py 8000 retrieval,target,retrieval warmup
#     25 consecutive 1-token passes per level in that order: ms / minor page faults (warmup_passes.txt)
import sys, statistics, time, argparse, resource, torch
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids  # noqa
from triforce.runtime.engine import Engine
from triforce.runtime.model import decoder_plan
torch.set_num_threads(2)
def med(f, n=41):
    for _ in range(3): f()
    ts = []
    for _ in range(n):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3
ap = argparse.ArgumentParser(); sub = ap.add_subparsers(dest="command")
from triforce.runtime.bench import add_bench_parser
add_bench_parser(sub)
args = ap.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                      "--budget", "1024", "--middle-weights", "int4", "--rope-scaling", "yarn:4", "--contexts", sys.argv[1]])
S = int(sys.argv[1])
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 9)
    levels = built_levels(engine, run, ids, S)
    for name in sys.argv[2].split(","):
        level = levels[name]; m = level.model; cache = level.cache
        plan = decoder_plan(m)
        n = cache.get_seq_length()
        if sys.argv[3] == "warmup":
            x, out = torch.tensor([ids[S:S + 1]]), []
            for i in range(25):
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t = time.perf_counter(); m(x, cache); dt = (time.perf_counter() - t) * 1e3; cache.crop(n)
                out.append(f"{dt:.1f}/{resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0}")
            print(name, " ".join(out), flush=True)
            continue
        for T in [int(t) for t in sys.argv[3].split(",")]:
            x = torch.tensor([ids[S - T + 1:S + 1]])
            def whole():
                m(x, cache); cache.crop(n)
            h = m.model.embed_tokens(x)
            def planned():
                cos, sin = cache.begin(T); plan.run(h, cos, sin, *cache.slots()); cache.end(); cache.crop(n)
            def head():
                m.lm_head(m.model.norm(h)).float()
            def begin_end():
                cos, sin = cache.begin(T); cache.slots(); cache.end(); cache.crop(n)
            r = {k: [] for k in ("whole", "plan", "head", "begin_end")}
            for rep in range(5):
                r["whole"].append(med(whole, 15)); r["plan"].append(med(planned, 15)); r["head"].append(med(head, 15)); r["begin_end"].append(med(begin_end, 15))
            print(name, S, T, "  ".join(f"{k} {min(v):.2f}/{statistics.median(v):.2f}" for k, v in r.items()), flush=True)
