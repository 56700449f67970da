"""`triforce batch`: many long-context requests from a JSONL file, durable and resumable.

    input JSONL ──read_jobs──> jobs (validated; bad lines become error records at once)   batch_input.py
                                 │  msgpack bytes (pack / unpack, size-limited)
                                 ▼
    driver queue ──> N replicas (local processes or Ray actors, each a Replica)         batch_replicas.py
                                 │  msgpack bytes
                                 ▼
    OutputFile.append: one whole JSON line, flushed and fsynced, under a lock             batch_output.py

Exactly once: only the driver writes the output (flock on OUTPUT.lock for the whole job), a record
is done once its line is on disk, and --resume skips the ids already there after checking
OUTPUT.manifest.json (same input, same settings). A record that fails in a batch is run again
alone; a job that kills replicas MAX_ATTEMPTS times alone becomes an error record, which
--resume --retry-errors runs again. Nothing a user supplies is ever unpickled: jobs and results
travel as msgpack. This file: the command, progress and the report.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

from triforce.runtime.flags import RUN_FLAGS as SHARED_RUN_FLAGS
# read_jobs ... schedule are also imported from here by tests and callers: this is the command's module
from triforce.runtime.batch_input import (MAX_MESSAGE_BYTES, check_defaults, error_record, pack, read_input,  # noqa: F401
                                 read_jobs, unpack)
from triforce.runtime.batch_output import OutputFile, manifest_for
from triforce.runtime.batch_replicas import Limits, LocalPool, RayPool, Replica, jobs_per_call, schedule  # noqa: F401
from triforce.runtime.config import RunConfig, load_run_config
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import ProgressLine, clock

# ------------------------------------------------------------------------------------ progress
def acceptance_of(record: dict) -> float | None:
    return record.get("stats", {}).get("levels", {}).get("target", {}).get("acceptance")


class Progress:
    """Records done/total, tokens/s, mean acceptance and ETA on the one progress line."""

    def __init__(self, total: int, already: int):
        self.total, self.done, self.start = total, already, time.perf_counter()
        self.new_done, self.errors, self.tokens, self.acceptances = 0, 0, 0, []
        self.line = ProgressLine(every_s=1.0)

    def update(self, record: dict) -> None:
        self.done += 1
        self.new_done += 1
        self.errors += record["status"] != "ok"
        self.tokens += len(record.get("token_ids") or [])
        if acceptance_of(record) is not None:
            self.acceptances.append(acceptance_of(record))
        self.show(force=self.done == self.total)

    def show(self, force: bool = False) -> None:
        elapsed = time.perf_counter() - self.start
        rate = self.new_done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        acc = f"{sum(self.acceptances) / len(self.acceptances):.2f}" if self.acceptances else "-"
        filled = int(20 * self.done / self.total)   # a bar 20 characters wide
        self.line.show(f"[triforce] batch [{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} records "
                       f"({self.errors} errors) | {self.tokens / elapsed if elapsed > 0 else 0:.1f} tok/s | "
                       f"acceptance {acc} | ETA {clock(eta)}", force)

    def note(self, message: str) -> None:
        self.line.close()   # the note on its own line
        print(f"[triforce] {message}", file=sys.stderr, flush=True)


# -------------------------------------------------------------------------------------- report
def summarize(records: list[dict], wall_s: float, new_tokens: int) -> dict:
    ok = [r for r in records if r["status"] == "ok"]
    by_mode = {}
    for r in ok:
        m = by_mode.setdefault(r["stats"].get("mode", "?"), {"records": 0, "new_tokens": 0, "decode_s": 0.0,
                                                            "acceptances": []})
        m["records"] += 1
        m["new_tokens"] += len(r["token_ids"])
        m["decode_s"] += r["stats"].get("decode_s") or 0.0
        if acceptance_of(r) is not None:
            m["acceptances"].append(acceptance_of(r))
    modes = {name: {"records": m["records"], "new_tokens": m["new_tokens"],
                    "decode_tokens_per_s": round(m["new_tokens"] / m["decode_s"], 3) if m["decode_s"] else None,
                    "mean_acceptance": round(sum(m["acceptances"]) / len(m["acceptances"]), 4)
                    if m["acceptances"] else None}
             for name, m in sorted(by_mode.items())}
    return {"records": len(records), "ok": len(ok), "error": len(records) - len(ok),
            "this_run": {"wall_s": round(wall_s, 3), "new_tokens": new_tokens,
                         "tokens_per_s": round(new_tokens / wall_s, 3) if wall_s > 0 else None},
            "by_mode": modes,
            "errors": [{"id": r["id"], "error": r["error"]} for r in records if r["status"] != "ok"][:100],
            "per_record": [{"id": r["id"], "mode": r["stats"].get("mode"), "prompt_tokens": r["stats"].get("prompt_tokens"),
                            "new_tokens": len(r["token_ids"]), "decode_tokens_per_s": r["stats"].get("tokens_per_s"),
                            "acceptance": acceptance_of(r)} for r in ok]}


def write_report(report_dir: Path, summary: dict) -> list[Path]:
    """summary.json and two PNG scatter plots against prompt length; returns the files written."""
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    written = [report_dir / "summary.json"]
    from triforce.runtime.bench import plots
    rows = summary["per_record"]
    for key, label, name in (("decode_tokens_per_s", "decode tokens/s", "tokens_per_s.png"),
                             ("acceptance", "target acceptance", "acceptance.png")):
        fig, ax = plots.pyplot().subplots(figsize=(6, 4))
        for mode in sorted({r["mode"] for r in rows}):
            pts = [(r["prompt_tokens"], r[key]) for r in rows if r["mode"] == mode and r[key] is not None]
            if pts:
                ax.scatter(*zip(*pts), label=mode, s=12)
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel(label)
        ax.set_title(f"{label} per record")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        written.append(plots.save(fig, report_dir / name))
    return written


def summary_table(summary: dict) -> str:
    run = summary["this_run"]
    lines = [f"batch: {summary['records']} records, {summary['ok']} ok, {summary['error']} errors | this run "
             f"{run['new_tokens']} tokens in {run['wall_s']:.1f} s = {run['tokens_per_s']} tok/s",
             f"{'mode':<10} {'records':>8} {'new tokens':>11} {'decode tok/s':>13} {'acceptance':>11}"]
    for mode, m in summary["by_mode"].items():
        acc = f"{m['mean_acceptance']:.2f}" if m["mean_acceptance"] is not None else "-"
        lines.append(f"{mode:<10} {m['records']:>8} {m['new_tokens']:>11} {m['decode_tokens_per_s'] or '-':>13} {acc:>11}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ CLI
RUN_FLAGS = SHARED_RUN_FLAGS + ("batch_size", "prefix_cache")
# RunConfig fields that do not change a record's tokens (batched == one at a time, offloaded ==
# resident, Ray == local: tests); every other field goes into the manifest.
NOT_RESULT_SETTINGS = ("batch_size", "prefix_cache", "prompt_cache", "backend", "tp", "pp", "ray_address", "ray_cpus", "ray_retries",
                       "on_chip_layers", "offload_weights", "offload", "prompt", "prompt_file", "kjv_books", "device")


def add_batch_parser(sub) -> None:
    from triforce.runtime.run_args import add_run_args
    p = sub.add_parser("batch", help="run a JSONL file of requests: durable, resumable, with replicas")
    p.add_argument("--input", required=True, help='JSONL: one {"id", "prompt" | "prompt_file" | "messages", ...} per line')
    p.add_argument("--output", required=True, help="JSONL of results, appended as records finish")
    p.add_argument("--config", help="YAML file of run settings: defaults for every record (flags override it)")
    p.add_argument("--resume", action="store_true", help="continue into an existing --output, skipping done ids")
    p.add_argument("--retry-errors", action="store_true", help="with --resume: run the error records again too")
    p.add_argument("--replicas", type=int, default=1, help="independent pipelines pulling from the queue")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="replicas as local processes or Ray actors")
    p.add_argument("--threads", type=int, help="torch threads per replica (default: cores / replicas)")
    p.add_argument("--report", help="report directory (default: OUTPUT with .report instead of its suffix)")
    p.add_argument("--call-timeout", type=float, default=Limits.call_timeout,
                   help=f"seconds a replica may take for one call (one record, or up to 4 x --batch-size of them; default {Limits.call_timeout:g})")
    p.add_argument("--start-timeout", type=float, default=Limits.start_timeout,
                   help=f"seconds a replica may take to load its model (default {Limits.start_timeout:g})")
    p.add_argument("--max-start-failures", type=int, default=Limits.max_start_failures,
                   help=f"replica starts failing in a row before the job fails (default {Limits.max_start_failures})")
    add_run_args(p)  # the run defaults, as `triforce generate` spells them
    p.add_argument("--batch-size", type=int, help="sequences each replica decodes together (default 1)")
    p.add_argument("--prefix-cache", action="store_true", default=None,
                   help="each replica keeps its last prompt's prefill and reuses the start a later prompt shares with it "
                        "(questions over one document prefill it once; outputs unchanged; holds one more KV cache)")
    p.set_defaults(func=cmd_batch)


def limits_from_args(args: argparse.Namespace) -> Limits:
    for name in ("call_timeout", "start_timeout"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise UserError(f"--{name.replace('_', '-')} {value} must be a positive number of seconds")
    if args.max_start_failures < 1:
        raise UserError(f"--max-start-failures {args.max_start_failures} must be at least 1")
    return Limits(call_timeout=args.call_timeout, start_timeout=args.start_timeout,
                  max_start_failures=args.max_start_failures)


def result_settings(defaults: RunConfig, model_dir: Path) -> dict:
    """The settings that decide the records' tokens, as the manifest keeps them."""
    settings = {k: v for k, v in dataclasses.asdict(defaults).items() if k not in NOT_RESULT_SETTINGS}
    settings["model"] = str(model_dir.resolve())
    return json.loads(json.dumps(settings))   # tuples -> lists, as they read back from JSON


def cmd_batch(args: argparse.Namespace) -> int:
    from triforce.offload.tier import remove_dead_segments
    from triforce.runtime.config import ModelConfig
    from triforce.runtime.engine import resolve_model_dir
    remove_dead_segments()   # host-tier arenas of killed runs
    if args.replicas < 1:
        raise UserError(f"--replicas {args.replicas} must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads} must be at least 1")
    if args.retry_errors and not args.resume:
        raise UserError("--retry-errors needs --resume (it reruns the error records of an existing --output)")
    limits = limits_from_args(args)
    defaults = check_defaults(load_run_config(args.config, **{k: getattr(args, k) for k in RUN_FLAGS}))
    defaults = dataclasses.replace(defaults, prompt=None, prompt_file=None, kjv_books=())  # records carry prompts
    model_dir = resolve_model_dir(defaults.model)
    ModelConfig.from_dir(model_dir)   # a bad --model fails here, not in N replicas
    input_path, output_path = Path(args.input).expanduser(), Path(args.output).expanduser()
    data = read_input(input_path)
    jobs, errors, total = read_jobs(input_path, defaults, data)
    manifest = manifest_for(input_path, data, result_settings(defaults, model_dir))
    output = OutputFile(output_path, resume=args.resume, manifest=manifest, retry_errors=args.retry_errors)
    try:
        return _run_batch(args, defaults, jobs, errors, total, output, output_path, limits)
    finally:
        output.close()


def _run_batch(args, defaults, jobs, errors, total, output, output_path, limits: Limits) -> int:
    already = sum(1 for j in [*jobs, *errors] if j["id"] in output.done)
    progress = Progress(total, already)
    if already:
        progress.note(f"resuming: {already}/{total} records already in {str(output_path)!r}")
    start = time.perf_counter()

    def on_record(record: dict) -> None:
        output.append(record)
        progress.update(record)

    for record in errors:
        if record["id"] not in output.done:
            on_record(record)
    todo = [j for j in jobs if j["id"] not in output.done]
    if todo:
        replicas = min(args.replicas, len(todo))
        threads = args.threads or max(1, (os.cpu_count() or 1) // replicas)
        pool_cls = RayPool if args.backend == "ray" else LocalPool
        progress.note(f"{len(todo)} records to run on {replicas} {args.backend} replica(s), {threads} thread(s) "
                      f"and batches of up to {defaults.batch_size} sequences each")
        pool = pool_cls(replicas, dataclasses.asdict(defaults), threads)
        try:
            schedule(todo, pool, jobs_per_call(defaults.batch_size), on_record, on_event=progress.note, limits=limits,
                     affinity=defaults.prefix_cache)
        finally:
            pool.close()
    progress.show(force=True)
    progress.line.close()
    wall = time.perf_counter() - start
    ids = {j["id"] for j in [*jobs, *errors]}
    records = [r for i, r in output.done.items() if i in ids]
    summary = summarize(records, wall, progress.tokens)
    report_dir = Path(args.report).expanduser() if args.report else output_path.with_suffix(".report")
    try:
        files = write_report(report_dir, summary)
    except OSError as e:   # the records are safe in the output; only the report is missing
        from triforce.runtime.durable import not_writable
        raise not_writable(report_dir, e) from None
    print(f"[triforce] {summary_table(summary)}".replace("\n", "\n[triforce] "), file=sys.stderr)
    print(f"[triforce] output {str(output_path)!r}; report {', '.join(str(f) for f in files)}", file=sys.stderr,
          flush=True)
    return 0
