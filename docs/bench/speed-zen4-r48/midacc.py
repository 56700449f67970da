"""Teacher-forced greedy agreement of the middle level at S tokens, by continuation position, for
retrieval-cache variants (budget, recent, chunk) and weights. python midacc.py S NEW OFFSETS VARIANTS...
VARIANT = weights,budget,recent,chunk (e.g. int4,2192,256,8; budget 0 = all)."""
import argparse, dataclasses, sys, time
import triforce.runtime
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, corpus_text
from triforce.runtime.bench.lower import teacher_forced, middle_level
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy

S, NEW = int(sys.argv[1]), int(sys.argv[2])
offsets = [int(o) for o in sys.argv[3].split(",")]
variants = [v.split(",") for v in sys.argv[4:]]
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                     "--corpus", "essays", "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
models = {"same": engine.model}
for w in {v[0] for v in variants} - {"same"}:
    models[w] = lower_level_copy(engine.model, w)
text = corpus_text("essays")
edges = [0, 16, 32, 64, 128, 256, 512]
with torch.inference_mode():
    for off in offsets:
        ids = engine.tokenizer.encode(text[off:off + 8 * S])[:S]
        request = dataclasses.replace(run, temperature=0.0, max_new_tokens=NEW)
        t0 = time.time()
        target, seq, tl = teacher_forced(engine, request, ids)
        print(f"offset {off}: teacher forcing {time.time() - t0:.1f} s", flush=True)
        n = len(seq) - len(ids)
        targ = tl.argmax(-1)
        for w, budget, recent, chunk in variants:
            r = dataclasses.replace(request, retrieval_budget=int(budget) or S + 16, retrieval_recent=int(recent), chunk_size=int(chunk))
            t0 = time.time()
            mid = middle_level(engine, r, models[w], target, len(ids) - 1, len(seq) + 8)
            lg = mid.feed(seq[:-1], keep_last=n)
            a = (lg.argmax(-1) == targ).float()
            parts = " ".join(f"{lo}-{hi}:{a[lo:hi].mean().item():.3f}" for lo, hi in zip(edges, edges[1:]) if lo < n)
            print(f"  {w:5s} budget {budget:>5s} recent {recent:>4s} chunk {chunk:>2s}: agreement {a.mean().item():.3f}  [{parts}]  ({time.time() - t0:.1f} s)", flush=True)
