"""Round 33, GPU: `ar` with its 1-token target passes replayed from a CUDA graph (the default now)
against the same requests run eagerly (--no-cuda-graphs), alternated in one process on one
engine, on random weights of Llama-2-7B-128K (timing only: bf16 argmaxes of random logits are not
a claim). With keep_prefill the requests of one context share one prefill.

    python3 docs/bench/gpu-r33/ar_graphs.py CONTEXTS OUT.json [--reps N] [--no-keep]
"""
import argparse
import json

from triforce.runtime.bench.random_weights import model_arg, random_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

ap = argparse.ArgumentParser()
ap.add_argument("contexts")
ap.add_argument("out")
ap.add_argument("--reps", type=int, default=2)
ap.add_argument("--new", type=int, default=64)
ap.add_argument("--model", default="configs/models/llama2-7b-128k.json")
ap.add_argument("--device", default="cuda")
ap.add_argument("--no-keep", action="store_true")
args = ap.parse_args()
contexts = [int(c) for c in args.contexts.split(",")]
base = dict(model=model_arg(args.model), dtype="bf16", device=args.device, max_new_tokens=args.new, mode="ar")
engine = Engine(RunConfig(**base), keep_prefill=not args.no_keep, context=max(contexts) + args.new + 16)
rows = []
for S in contexts:
    ids = random_ids(engine.cfg.vocab_size, S)
    tokens = {}
    for rep in range(args.reps):
        for graphs in (False, True):
            r = engine.generate(ids, RunConfig(cuda_graphs=graphs, **base))
            level = r.stats["levels"]["ar"] if "ar" in r.stats.get("levels", {}) else next(iter(r.stats["levels"].values()))
            row = dict(context=S, cuda_graphs=graphs, rep=rep, ms_per_token=r.stats["ms_per_token"],
                       prefill_s=r.stats["prefill_s"], prefill_reused=r.stats["prefill_reused"],
                       new_tokens=r.stats["new_tokens"], replayed_shapes=level.get("cuda_graphs"))
            tokens.setdefault(graphs, r.token_ids)
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps(dict(context=S, same_tokens_graph_vs_eager=tokens[False] == tokens[True],
                          first_difference=next((i for i, (a, b) in enumerate(zip(tokens[False], tokens[True])) if a != b), None))),
          flush=True)
with open(args.out, "w") as f:
    json.dump(rows, f, indent=1)
