"""`triforce bench --suite batch`: throughput of batched decoding, modes x batch sizes side by side.

    triforce bench --suite batch --contexts 1024 --new-tokens 32 --batch-sizes 1 2 4 \
        --modes ar triforce --budget 256 --threads 1 --out OUT

Each configuration decodes B different passages of `context` tokens together (consecutive ones of
--prompt-file, else of the --corpus text; greedy, runtime/decode_batched.py) and reports generated
tokens per second of *decode* wall time: from the
moment the last sequence finished its prefill to the moment the last one finished decoding
(all sequences start together, so sequence i ends at prefill_s + decode_s after the start).
Every batched run is also checked token for token against the same prompts decoded one at a
time at B = 1 (the first batch size must be 1).
"""
from __future__ import annotations

import dataclasses
import statistics
import time

from triforce.runtime.decode_batched import generate_batch
from triforce.runtime.bench.registry import register
from triforce.runtime.bench.report import markdown_table
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime.errors import UserError


def run_one(engine: Engine, prompts: list[list[int]], run) -> dict:
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
                target_packed_rows=outcome.packed_rows["target"],
                drafter_passes=sum(n for weights, n in outcome.passes.items() if weights.startswith("drafter")),
                passes=outcome.passes, packed_rows=outcome.packed_rows,   # per weights: target, middle-int4, drafter-...
                target_acceptance=[a for a in target if a is not None],
                token_ids=[r.token_ids for r in outcome.results])


def suite_batch(args) -> dict:
    if args.batch_sizes[0] != 1:
        raise UserError(f"--batch-sizes {args.batch_sizes}: the first must be 1 (the one-at-a-time reference)")
    base = base_run(args, temperature=0.0)
    engine = Engine(dataclasses.replace(base, mode="triforce"))
    context = int(args.contexts[0])
    ids = prompt_ids(engine, args, context * max(args.batch_sizes))
    prompts = [ids[i * context:(i + 1) * context] for i in range(max(args.batch_sizes))]
    rows, alone = [], {}
    runs = {mode: dataclasses.replace(base, mode=mode) for mode in args.modes}
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
            print(f"[bench] batch {b} {mode}: {r['tokens_per_s']} tok/s", flush=True)
    rows.sort(key=lambda r: (args.modes.index(r["mode"]), r["batch"]))
    return dict(suite="batch", context=context, new_tokens=args.new_tokens, rows=rows)


def table_batch(report: dict) -> str:
    rows = report["rows"]

    def base(r):
        return next(x for x in rows if x["mode"] == r["mode"] and x["batch"] == 1)["tokens_per_s"]

    return markdown_table(
        ["mode", "batch", "decode tok/s", "vs batch 1", "tokens", "target-weight passes", "sequences per such pass",
         "drafter passes", "target acceptance", "same tokens as batch 1"],
        [[r["mode"], str(r["batch"]), str(r["tokens_per_s"]), f"{r['tokens_per_s'] / base(r):.2f}x", str(r["tokens"]),
          str(r["target_passes"]), f"{r['target_packed_rows'] / r['target_passes']:.2f}", str(r["drafter_passes"]),
          str(r["mean_target_acceptance"] or "-"), "yes" if r["same_as_one_at_a_time"] else "NO"] for r in rows])


register("batch", table=table_batch,
         help="batched decoding: modes x --batch-sizes, tok/s and equality with one at a time")(suite_batch)
