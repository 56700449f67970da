"""`triforce bench --suite ray`: per-token overhead of the Ray backend over the in-process path.

    triforce bench --suite ray --contexts 8000 --new-tokens 32 --modes ar triforce --repeats 2 [--tp 1 --pp 1]

The same prompt (the KJV's Genesis + Exodus) and settings run locally and on a local Ray cluster
(one coordinator, tp x pp shards, one torch thread each, as the local path), alternating local
and Ray runs (--repeats), checks that the tokens are equal, and reports median decode ms/token of
both, the overhead, remote calls per generated token, and the coordinator's wait per forward pass
against the same pass in-process, split into the shard's own time and what Ray adds (the wait
minus the shard's time: scheduling, serialization, transfer).
"""
from __future__ import annotations

import dataclasses

import torch

from triforce.runtime.bench.measure import interleaved, spread
from triforce.runtime.bench.registry import register
from triforce.runtime.bench.report import markdown_table
from triforce.runtime.bench.suites import base_run
from triforce.runtime.config import RunConfig


def suite_ray(args) -> dict:
    import ray

    from triforce.actors.client import connect
    from triforce.runtime.assets import kjv_books
    from triforce.runtime.backends import open_engine
    from triforce.runtime.engine import Engine

    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # as each actor: one thread per process
    try:
        base = base_run(args, temperature=0.0, device="cpu")
        local = Engine(dataclasses.replace(base, mode=args.modes[-1]), keep_prefill=True)
        ids = local.tokenizer.encode(kjv_books(["Genesis", "Exodus"]))[:int(args.contexts[0])]

        def remote_run(mode: str) -> RunConfig:
            return dataclasses.replace(base, mode=mode, backend="ray", tp=args.tp, pp=args.pp)

        started = not ray.is_initialized()   # a cluster we start is ours to shut down
        connect(remote_run(args.modes[-1]))
        remote = open_engine(remote_run(args.modes[-1]))
        rows = []
        try:
            for mode in args.modes:
                with torch.inference_mode():   # alternating, so that load from elsewhere hits both alike
                    both = interleaved({"local": lambda: local.generate(ids, dataclasses.replace(base, mode=mode)),
                                        "ray": lambda: remote.generate(ids, remote_run(mode))}, args.repeats, warmup=0)
                runs = list(zip(both["local"], both["ray"]))
                rows.append(ray_row(mode, ids, runs))
                print(table_ray(dict(rows=rows[-1:])).splitlines()[-1], flush=True)
        finally:
            remote.close()
            if started:
                ray.shutdown()
    finally:
        torch.set_num_threads(threads)
    return dict(suite="ray", tp=args.tp, pp=args.pp, new_tokens=args.new_tokens, repeats=args.repeats, rows=rows)


def ray_row(mode: str, ids: list[int], runs: list) -> dict:
    """One mode's figures from (local, ray) result pairs: the median run of each side."""
    a = sorted((x for x, _ in runs), key=lambda x: x.stats["ms_per_token"])[(len(runs) - 1) // 2]
    b = sorted((y for _, y in runs), key=lambda y: y.stats["ms_per_token"])[(len(runs) - 1) // 2]
    target_passes = sum(lv["passes"] for name, lv in a.stats["levels"].items() if name != "drafter")
    target_s = sum(lv["seconds"] for name, lv in a.stats["levels"].items() if name != "drafter")
    r = b.stats["ray"]
    return dict(mode=mode, context=len(ids), new_tokens=len(a.token_ids),
                equal=all(x.token_ids == y.token_ids for x, y in runs),
                local_ms_per_token=spread([x.stats["ms_per_token"] for x, _ in runs]),
                ray_ms_per_token=spread([y.stats["ms_per_token"] for _, y in runs]),
                overhead=round(b.stats["ms_per_token"] / a.stats["ms_per_token"] - 1, 4),
                calls_per_token=r["calls_per_token"],
                local_ms_per_pass=round(1000 * target_s / target_passes, 3), ray_ms_per_pass=r["ms_per_decode_pass"],
                shard_ms_per_pass=r["shard_ms_per_decode_pass"], ray_only_ms_per_pass=r["ray_ms_per_decode_pass"],
                local_prefill_s=a.stats["prefill_s"], ray_prefill_s=b.stats["prefill_s"], ray=r)


def table_ray(report: dict) -> str:
    return markdown_table(
        ["mode", "context", "tokens equal", "local ms/token", "ray ms/token", "overhead", "remote calls/token (decode)",
         "local ms/pass", "ray ms/pass (coordinator wait)", "of which shard compute", "of which Ray"],
        [[r["mode"], str(r["context"]), str(r["equal"]), str(r["local_ms_per_token"]["median"]),
          str(r["ray_ms_per_token"]["median"]), f"{r['overhead']:+.1%}", str(r["calls_per_token"]),
          str(r["local_ms_per_pass"]), str(r["ray_ms_per_pass"]), str(r["shard_ms_per_pass"]),
          str(r["ray_only_ms_per_pass"])] for r in report["rows"]])


register("ray", table=table_ray, help="in-process vs the Ray backend (--tp, --pp), same requests")(suite_ray)
