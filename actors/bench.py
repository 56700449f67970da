"""Per-token overhead of the Ray backend over the in-process path (figures in docs/BENCHMARKS.md):

    python -m actors.bench --context 8000 --new-tokens 32 --modes ar,triforce [--tp 1 --pp 1]

Runs the same prompt (the embedded KJV) and settings locally and on a local Ray cluster (one
shard, one coordinator, one torch thread each, as the local path), alternating local and Ray runs
(--repeats), checks the tokens are equal, and prints median decode ms/token for both, the overhead, remote calls per generated token, and the
coordinator's wait per forward pass against the same pass in-process, split into the shard's own
time and what Ray adds (the wait minus the shard's time: scheduling, serialization, transfer).
"""
from __future__ import annotations

import argparse
import json

import torch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m actors.bench")
    p.add_argument("--context", type=int, default=8000, help="prompt tokens")
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--modes", default="ar,triforce")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--retrieval-budget", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=2, help="local and ray runs alternate; medians reported")
    args = p.parse_args(argv)
    import ray
    from actors.client import connect
    from runtime.assets import kjv_books
    from runtime.config import RunConfig
    from runtime.engine import Engine, open_engine

    torch.set_num_threads(1)
    modes = args.modes.split(",")
    base = dict(max_new_tokens=args.new_tokens, retrieval_budget=args.retrieval_budget, device="cpu")
    local = Engine(RunConfig(mode=modes[-1], **base), keep_prefill=True)
    ids = local.tokenizer.encode(kjv_books(["Genesis", "Exodus"]))[:args.context]
    remote_run = lambda mode: RunConfig(mode=mode, backend="ray", tp=args.tp, pp=args.pp, **base)  # noqa: E731
    connect(remote_run(modes[-1]))
    remote = open_engine(remote_run(modes[-1]))
    rows = []
    for mode in modes:
        runs = [(local.generate(ids, RunConfig(mode=mode, **base)), remote.generate(ids, remote_run(mode)))
                for _ in range(args.repeats)]   # alternating, so that load from elsewhere hits both alike
        a = sorted((x for x, _ in runs), key=lambda x: x.stats["ms_per_token"])[(args.repeats - 1) // 2]
        b = sorted((y for _, y in runs), key=lambda y: y.stats["ms_per_token"])[(args.repeats - 1) // 2]
        target_passes = sum(lv["passes"] for name, lv in a.stats["levels"].items() if name != "drafter")
        target_s = sum(lv["seconds"] for name, lv in a.stats["levels"].items() if name != "drafter")
        r = b.stats["ray"]
        rows.append(dict(
            mode=mode, context=len(ids), new_tokens=len(a.token_ids), equal=all(x.token_ids == y.token_ids for x, y in runs),
            repeats_ms_per_token=[(x.stats["ms_per_token"], y.stats["ms_per_token"]) for x, y in runs],
            local_ms_per_token=a.stats["ms_per_token"], ray_ms_per_token=b.stats["ms_per_token"],
            overhead=round(b.stats["ms_per_token"] / a.stats["ms_per_token"] - 1, 4),
            calls_per_token=r["calls_per_token"],
            local_ms_per_pass=round(1000 * target_s / target_passes, 3), ray_ms_per_pass=r["ms_per_decode_pass"],
            shard_ms_per_pass=r["shard_ms_per_decode_pass"], ray_only_ms_per_pass=r["ray_ms_per_decode_pass"],
            local_prefill_s=a.stats["prefill_s"], ray_prefill_s=b.stats["prefill_s"], ray=r))
        print(json.dumps(rows[-1]), flush=True)
    remote.close()
    ray.shutdown()
    print("| mode | context | tokens equal | local ms/token | ray ms/token | overhead | remote calls/token "
          "(decode) | local ms/pass | ray ms/pass (coordinator wait) | of which shard compute | of which Ray |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['mode']} | {r['context']} | {r['equal']} | {r['local_ms_per_token']} | {r['ray_ms_per_token']} | "
              f"{r['overhead']:+.1%} | {r['calls_per_token']} | {r['local_ms_per_pass']} | {r['ray_ms_per_pass']} | "
              f"{r['shard_ms_per_pass']} | {r['ray_only_ms_per_pass']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
