"""Throughput of batched decoding: modes x batch sizes side by side in one process.

    python -m runtime.bench_batch --context 1024 --new-tokens 32 --batch-sizes 1 2 4 \
        --modes ar triforce --budget 256 --threads 1 --out OUT

Each configuration decodes B different KJV passages of `context` tokens together (greedy,
runtime/batched.py) and reports generated tokens per second of *decode* wall time: from the
moment the last sequence finished its prefill to the moment the last one finished decoding
(all sequences start together, so sequence i ends at prefill_s + decode_s after the start).
Every batched run is also checked token for token against the same prompts decoded one at a
time at B = 1 (the first batch size must be 1).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

from runtime.batched import generate_batch
from runtime.config import RunConfig
from runtime.engine import Engine


def run_one(engine: Engine, prompts: list[list[int]], run: RunConfig) -> dict:
    start = time.perf_counter()
    outcome = generate_batch(engine, prompts, [run] * len(prompts))
    wall = time.perf_counter() - start
    for r in outcome.results:
        if isinstance(r, BaseException):
            raise r
    ends = [r.stats["prefill_s"] + r.stats["decode_s"] for r in outcome.results]
    decode_wall = max(ends) - max(r.stats["prefill_s"] for r in outcome.results)
    tokens = sum(len(r.token_ids) for r in outcome.results)
    target = [r.stats["levels"]["target"].get("acceptance") for r in outcome.results]
    return dict(tokens=tokens, decode_wall_s=round(decode_wall, 3), wall_s=round(wall, 3),
                tokens_per_s=round(tokens / decode_wall, 3), target_passes=outcome.passes["target"],
                target_packed_rows=outcome.packed_rows["target"], drafter_passes=outcome.passes.get("drafter", 0),
                target_acceptance=[a for a in target if a is not None],
                token_ids=[r.token_ids for r in outcome.results])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m runtime.bench_batch", description=__doc__.splitlines()[0])
    p.add_argument("--context", type=int, default=1024, help="prompt tokens per sequence (KJV text)")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--modes", nargs="+", default=["ar", "triforce"])
    p.add_argument("--budget", type=int, default=256, help="retrieval budget (tokens)")
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--gamma2", type=int, default=6)
    p.add_argument("--dtype", default="fp32")
    p.add_argument("--threads", type=int, help="torch CPU threads")
    p.add_argument("--out", help="directory for results.json")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    engine = Engine(RunConfig(mode="triforce", dtype=args.dtype))
    from runtime.assets import kjv_books
    ids = engine.tokenizer.encode(kjv_books(["Genesis", "Exodus"]))
    B = max(args.batch_sizes)
    prompts = [ids[i * args.context:(i + 1) * args.context] for i in range(B)]
    rows, alone = [], {}
    runs = {mode: RunConfig(mode=mode, dtype=args.dtype, max_new_tokens=args.new_tokens, retrieval_budget=args.budget,
                            gamma1=args.gamma1, gamma2=args.gamma2) for mode in args.modes}
    for run in runs.values():   # warm-up
        generate_batch(engine, [prompts[0][:256]], [dataclasses.replace(run, max_new_tokens=4)])
    for b in args.batch_sizes:          # modes interleaved per batch size: machine drift hits them alike
        for mode, run in runs.items():
            r = run_one(engine, prompts[:b], run)
            if b == 1:
                alone[mode] = [r["token_ids"][0]] + [run_one(engine, [p], run)["token_ids"][0] for p in prompts[1:]]
            r["same_as_one_at_a_time"] = r["token_ids"] == alone[mode][:b]
            del r["token_ids"]
            r.update(mode=mode, batch=b)
            acc = r.pop("target_acceptance")
            r["mean_target_acceptance"] = round(statistics.mean(acc), 3) if acc else None
            rows.append(r)
            print(json.dumps(r), flush=True)
    rows.sort(key=lambda r: (args.modes.index(r["mode"]), r["batch"]))
    print(f"\n| mode | batch | decode tok/s | vs batch 1 | tokens | target-weight passes | sequences per such pass | "
          f"drafter passes | target acceptance | same tokens as batch 1 |\n|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        base = next(x for x in rows if x["mode"] == r["mode"] and x["batch"] == 1)["tokens_per_s"]
        print(f"| {r['mode']} | {r['batch']} | {r['tokens_per_s']} | {r['tokens_per_s'] / base:.2f}x | {r['tokens']} | "
              f"{r['target_passes']} | {r['target_packed_rows'] / r['target_passes']:.2f} | {r['drafter_passes']} | "
              f"{r['mean_target_acceptance'] or '-'} | "
              f"{'yes' if r['same_as_one_at_a_time'] else 'NO'} |")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.json").write_text(json.dumps(dict(args=vars(args), rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
