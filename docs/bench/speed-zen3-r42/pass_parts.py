"""Where a middle-level T=1 pass's wall time goes outside the decoder plan: plan.run, the head, the rest."""
import sys, time, argparse, torch, os
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.passes import built_levels
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime import model as M
S = int(sys.argv[1]); T = int(sys.argv[2]); level = sys.argv[3]
parser = argparse.ArgumentParser(); sub = parser.add_subparsers(dest="command"); add_bench_parser(sub)
args = parser.parse_args(["bench", "--suite", "passes", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2", "--corpus", "essays", "--levels", "target"])
torch.set_num_threads(2)
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = prompt_ids(engine, args, S + 1)
    lv = built_levels(engine, run, ids, S)[level]
    x = torch.tensor([ids[S - T + 1:S + 1]])
    n = lv.cache.get_seq_length()
    model = lv.model
    plan = M.decoder_plan(model)
    acc = dict(plan=0.0, head=0.0)
    class Timed:
        def __init__(self, f, key): self.f, self.key = f, key
        def __call__(self, *a, **k):
            t = time.perf_counter(); r = self.f(*a, **k); acc[self.key] += time.perf_counter() - t; return r
    for _ in range(3): lv.model(x, lv.cache); lv.cache.crop(n)
    import types
    orig_head = model.head
    M._PLANS[model] = types.SimpleNamespace(run=Timed(plan.run, "plan"), run_packed=plan.run_packed)
    model.head = Timed(orig_head, "head")
    k = 0; t0 = time.perf_counter()
    while k < 400:
        lv.model(x, lv.cache); lv.cache.crop(n); k += 1
    total = (time.perf_counter() - t0) / k * 1e3
    print(f"{level} S={S} T={T}: pass {total:.2f} ms; plan.run {acc['plan']/k*1e3:.2f}; head (norm, lm_head, float) {acc['head']/k*1e3:.2f}; rest {total - (acc['plan']+acc['head'])/k*1e3:.2f}")
