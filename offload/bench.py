"""`triforce bench --suite offload`: the same job resident and offloaded, side by side in one process.

Placements: resident; KV offloaded (every layer's full KV in the host tier, on_chip_layers 0);
KV and weights offloaded. For `ar` and `triforce`, decode ms/token (median of repeats after a
warm-up), the overhead over resident, and the bytes moved between the tiers per generated token.
On a CPU-only machine both tiers are the same RAM, so this measures the cost of the tier
machinery itself (copies, events, the copy threads); on a GPU it measures PCIe streaming.
"""
from __future__ import annotations

import dataclasses
import statistics

from runtime.config import RunConfig
from runtime.engine import Engine

PLACEMENTS = {"resident": {}, "kv": dict(on_chip_layers=0), "kv+weights": dict(on_chip_layers=0)}


def _no_eos(engine: Engine):
    """Benchmarks generate exactly new_tokens: EOS does not stop them."""
    engine.cfg = dataclasses.replace(engine.cfg, eos_token_ids=())
    return engine


def suite_offload(args) -> dict:
    from runtime.assets import kjv_text
    base = dict(model=args.model, draft_model=args.draft_model, dtype=args.dtypes[0], rope_scaling=args.rope_scaling,
                max_new_tokens=args.new_tokens, retrieval_budget=args.budget, gamma1=args.gamma1, gamma2=args.gamma2,
                temperature=0.0)
    resident = _no_eos(Engine(RunConfig(mode="triforce", **base), keep_prefill=True))
    streamed = _no_eos(Engine(RunConfig(mode="triforce", offload_weights=True, **base), keep_prefill=True))
    engines = {"resident": resident, "kv": resident, "kv+weights": streamed}
    rows = []
    for context in args.contexts:
        ids = resident.tokenizer.encode(kjv_text()[:context * 6])[:context]
        for mode in ("ar", "triforce"):
            times = {p: [] for p in PLACEMENTS}
            moved, outputs = {}, {}
            for rep in range(args.repeats + 1):          # round 0 is a warm-up and is dropped
                for placement, extra in PLACEMENTS.items():  # interleaved, so drift hits all alike
                    result = engines[placement].generate(ids, RunConfig(mode=mode, **base, **extra))
                    outputs[placement] = result.token_ids
                    if rep:
                        times[placement].append(result.stats["ms_per_token"])
                    moved[placement] = result.stats.get("offload", {}).get("moved_bytes_per_token_total", 0)
            res_ms = statistics.median(times["resident"])
            for placement in PLACEMENTS:
                ms = statistics.median(times[placement])
                rows.append(dict(context=len(ids), mode=mode, placement=placement, ms_per_token=ms,
                                 ms_all=[round(t, 1) for t in times[placement]], overhead=ms / res_ms - 1,
                                 moved_mb_per_token=moved[placement] / 1e6,
                                 same_tokens=outputs[placement] == outputs["resident"]))
                print(_row(rows[-1]), flush=True)
    return dict(suite="offload", rows=rows)


def _row(r: dict) -> str:
    return (f"| {r['context']} | {r['mode']} | {r['placement']} | {r['ms_per_token']:.1f} | {100 * r['overhead']:+.1f}% "
            f"| {r['moved_mb_per_token']:.1f} | {'yes' if r['same_tokens'] else 'NO'} |")


def print_offload(report: dict) -> None:
    print("| context | mode | placement | ms/token | overhead vs resident | MB moved per token | same tokens |")
    print("|---|---|---|---|---|---|---|")
    for r in report["rows"]:
        print(_row(r))
