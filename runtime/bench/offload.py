"""`triforce bench --suite offload`: the same job resident and offloaded, side by side in one process.

Placements: resident; KV offloaded (every layer's full KV in the host tier, on_chip_layers 0);
KV and weights offloaded. For `ar` and `triforce`, decode ms/token (median of repeats after a
warm-up), the overhead over resident, and the bytes moved between the tiers per generated token.
On a CPU-only machine both tiers are the same RAM, so this measures the cost of the tier
machinery itself (copies, events, the copy threads); on a GPU it measures PCIe streaming.
"""
from __future__ import annotations

import dataclasses
import functools
import statistics

from triforce.runtime.bench.measure import generate_unstopped, interleaved
from triforce.runtime.bench.registry import register
from triforce.runtime.bench.report import markdown_table
from triforce.runtime.bench.suites import base_run, longest_context, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime.probes import h2d_bandwidth

PLACEMENTS = {"resident": {}, "kv": dict(on_chip_layers=0), "kv+weights": dict(on_chip_layers=0)}


def suite_offload(args) -> dict:
    base = base_run(args, temperature=0.0)
    resident = Engine(dataclasses.replace(base, mode="triforce"), keep_prefill=True)
    streamed = Engine(dataclasses.replace(base, mode="triforce", offload_weights=True), keep_prefill=True)
    engines = {"resident": resident, "kv": resident, "kv+weights": streamed}
    rows = []
    for context in [longest_context(resident, base) if c == "max" else int(c) for c in args.contexts]:
        ids = prompt_ids(resident, args, context)
        for mode in [m for m in ("ar", "triforce") if m in args.modes]:
            runs = interleaved({p: functools.partial(generate_unstopped, engines[p], ids,
                                                     dataclasses.replace(base, mode=mode, **extra))
                                for p, extra in PLACEMENTS.items()}, args.repeats)
            times = {p: [r.stats["ms_per_token"] for r in runs[p]] for p in PLACEMENTS}
            outputs = {p: runs[p][-1].token_ids for p in PLACEMENTS}
            moved = {p: runs[p][-1].stats.get("offload", {}).get("moved_bytes_per_token_total", 0) for p in PLACEMENTS}
            res_ms = statistics.median(times["resident"])
            for placement in PLACEMENTS:
                ms = statistics.median(times[placement])
                rows.append(dict(context=len(ids), mode=mode, placement=placement, ms_per_token=ms,
                                 ms_all=[round(t, 1) for t in times[placement]], overhead=round(ms / res_ms - 1, 4),
                                 moved_mb_per_token=round(moved[placement] / 1e6, 2),
                                 moved_gb_per_s=round(moved[placement] / ms / 1e6, 2),  # while decoding
                                 same_tokens=outputs[placement] == outputs["resident"]))
                print(table_offload(dict(rows=rows[-1:])).splitlines()[-1], flush=True)
    link = h2d_bandwidth() if resident.device.type == "cuda" else None  # a plain pinned copy, for scale
    return dict(suite="offload", new_tokens=args.new_tokens, repeats=args.repeats, rows=rows,
                h2d_copy_gbs=round(link / 1e9, 2) if link else None)


def table_offload(report: dict) -> str:
    return markdown_table(
        ["context", "mode", "placement", "ms/token (all)", "overhead vs resident", "MB moved per token",
         "GB/s moved", "same tokens"],
        [[str(r["context"]), r["mode"], r["placement"], f"{r['ms_per_token']:.1f} ({', '.join(map(str, r['ms_all']))})",
          f"{100 * r['overhead']:+.1f}%", f"{r['moved_mb_per_token']:.1f}", f"{r.get('moved_gb_per_s', 0):.1f}",
          "yes" if r["same_tokens"] else "NO"]
         for r in report["rows"]]) + (f"\n\nA plain page-locked host->device copy: {report['h2d_copy_gbs']} GB/s."
                                      if report.get("h2d_copy_gbs") else "")


register("offload", table=table_offload,
         help="resident vs KV offloaded vs KV+weights offloaded, ar and triforce (the tier machinery's cost)")(suite_offload)
