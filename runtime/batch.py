"""`triforce batch`: many long-context requests from a JSONL file, durable and resumable.

    input JSONL ──read_jobs──> jobs (validated; bad lines become error records at once)
                                 │  msgpack bytes (pack / unpack, size-limited)
                                 ▼
    driver queue ──> N replicas (local processes or Ray actors, each a Replica over its own Engine)
                                 │  msgpack bytes
                                 ▼
    OutputFile.append: one whole JSON line, flushed and fsynced before the record counts as done

Exactly once: only the driver writes the output, a record is done once its line is on disk, and
--resume skips the ids already there (a torn last line, from a kill mid-write, is cut off first).
A replica that dies puts its in-flight jobs back at the front of the queue and is replaced; a job
that kills replicas MAX_ATTEMPTS times becomes an error record instead of looping forever.
Nothing a user supplies is ever unpickled: jobs and results travel as msgpack.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from collections import Counter, deque
from pathlib import Path

import msgpack

from runtime.flags import RUN_FLAGS as SHARED_RUN_FLAGS
from runtime.config import RunConfig, load_run_config
from runtime.errors import UserError

MAX_MESSAGE_BYTES = 64 << 20   # largest job or result message between the driver and a replica
MAX_ATTEMPTS = 2               # replica deaths a job may cause before it is recorded as an error
RECORD_PARAMS = {"max_new_tokens": int, "temperature": float, "top_p": float, "top_k": int, "seed": int,
                 "mode": str}  # per-record overrides of the run defaults, with their types
PROMPT_KEYS = ("prompt", "prompt_file", "messages")
TYPE_NAMES = {int: "an int", float: "a number", str: "a string"}


# ---------------------------------------------------------------------------------------- wire
def pack(message: dict) -> bytes:
    data = msgpack.packb(message, use_bin_type=True)
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    return data


def unpack(data: bytes) -> dict:
    """msgpack bytes -> dict; refuses oversized input before decoding it (msgpack also bounds
    every string, array and map by the input's length)."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"message of {len(data)} bytes exceeds the {MAX_MESSAGE_BYTES}-byte limit")
    message = msgpack.unpackb(data, raw=False, strict_map_key=True)
    if not isinstance(message, dict):
        raise ValueError(f"expected a msgpack map, got {type(message).__name__}")
    return message


# ------------------------------------------------------------------------------------- records
def error_record(job_id: str, line: int, reason: str) -> dict:
    return {"id": job_id, "status": "error", "error": f"line {line}: {reason}", "text": None, "token_ids": [],
            "stats": {}, "line": line}


def _check_params(params: dict, defaults: RunConfig) -> RunConfig:
    """The record's RunConfig, or UserError naming the bad parameter."""
    for key, value in params.items():
        kind = RECORD_PARAMS[key]
        ok = (isinstance(value, kind) and not isinstance(value, bool)) or \
             (kind is float and isinstance(value, int) and not isinstance(value, bool))
        if not ok:
            raise UserError(f"{key} {value!r} must be {TYPE_NAMES[kind]}")
        if kind is float and not math.isfinite(value):
            raise UserError(f"{key} {value!r} must be finite")
    return dataclasses.replace(defaults, **params).validate()


def _check_job(raw: object, line: int, base: Path, defaults: RunConfig) -> dict:
    """A validated job {"line", "id", <prompt key>, "params"}, or UserError with the reason."""
    if not isinstance(raw, dict):
        raise UserError(f"expected a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - {"id", *PROMPT_KEYS, *RECORD_PARAMS})
    if unknown:
        raise UserError(f"unknown key(s) {', '.join(unknown)}; known: id, {', '.join(PROMPT_KEYS)}, "
                        f"{', '.join(RECORD_PARAMS)}")
    given = [k for k in PROMPT_KEYS if k in raw]
    if len(given) != 1:
        raise UserError(f"needs exactly one of {', '.join(PROMPT_KEYS)} (got {', '.join(given) or 'none'})")
    key, value = given[0], raw[given[0]]
    if key == "prompt" and not (isinstance(value, str) and value.strip()):
        raise UserError("prompt must be a non-empty string")
    if key == "prompt_file":
        if not (isinstance(value, str) and value):
            raise UserError("prompt_file must be a path string")
        path = (base / Path(value).expanduser())  # relative paths: relative to the input file
        if not path.is_file():
            raise UserError(f"prompt file {value!r} does not exist (looked for {str(path)!r})")
        value = str(path)
    if key == "messages":
        if not (isinstance(value, list) and value and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in value)):
            raise UserError('messages must be a non-empty list of {"role": str, "content": str}')
    params = {k: raw[k] for k in RECORD_PARAMS if k in raw}
    _check_params(params, defaults)
    return {"line": line, "id": raw["id"], key: value, "params": params}


def read_jobs(path: Path, defaults: RunConfig) -> tuple[list[dict], list[dict], int]:
    """(jobs, error records, total records) from a JSONL file. Blank lines are skipped; every other
    line is a record. Duplicate ids and an input without records are refused (UserError)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"input file {str(path)!r} does not exist") from None
    except OSError as e:
        raise UserError(f"cannot read input file {str(path)!r}: {e.strerror}") from None
    jobs, errors, seen = [], [], {}
    for line, raw_line in enumerate(data.split(b"\n"), start=1):
        if not raw_line.strip():
            continue
        job_id = f"<line {line}>"   # until the line yields an id of its own
        try:
            if len(raw_line) > MAX_MESSAGE_BYTES // 2:
                raise UserError(f"record of {len(raw_line)} bytes exceeds the {MAX_MESSAGE_BYTES // 2}-byte limit; "
                                "put long prompts in a prompt_file")
            try:
                raw = json.loads(raw_line.decode("utf-8"))
            except UnicodeDecodeError as e:
                raise UserError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
            except json.JSONDecodeError as e:
                raise UserError(f"malformed JSON ({e.msg} at column {e.colno})") from None
            if isinstance(raw, dict) and "id" in raw:
                if not (isinstance(raw["id"], str) and raw["id"]):
                    raise UserError(f"id {raw['id']!r} must be a non-empty string")
                job_id = raw["id"]
            elif isinstance(raw, dict):
                raise UserError('record has no "id"')
            seen.setdefault(job_id, []).append(line)
            jobs.append(_check_job(raw, line, path.parent, defaults))
        except UserError as e:
            seen.setdefault(job_id, [])
            if line not in seen[job_id]:
                seen[job_id].append(line)
            errors.append(error_record(job_id, line, str(e)))
    duplicates = {i: lines for i, lines in seen.items() if len(lines) > 1}
    if duplicates:
        shown = "; ".join(f"{i!r} on lines {', '.join(map(str, lines))}" for i, lines in list(duplicates.items())[:5])
        raise UserError(f"input {str(path)!r} has {len(duplicates)} duplicate id(s): {shown}; ids must be unique")
    total = len(jobs) + len(errors)
    if total == 0:
        raise UserError(f"input {str(path)!r} has no records; expected one JSON object per line, e.g. "
                        '{"id": "a", "prompt": "..."}')
    return jobs, errors, total


# -------------------------------------------------------------------------------------- output
class OutputFile:
    """Append-only JSONL of finished records. A record counts as done once its whole line is
    written, flushed and fsynced; nothing else ever writes the file."""

    def __init__(self, path: Path, resume: bool):
        self.path, self.done = path, {}
        if path.exists() and path.stat().st_size and not resume:
            raise UserError(f"output {str(path)!r} already exists; pass --resume to continue that job, or "
                            "choose another --output")
        if resume and path.exists():
            self.done = self._recover()
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _recover(self) -> dict:
        """Reads the records already done; cuts off a torn last line (a kill mid-write)."""
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            with open(self.path, "r+b") as f:
                f.truncate(whole)
                os.fsync(f.fileno())
        done = {}
        for n, raw in enumerate(data[:whole].split(b"\n")[:-1], start=1):
            try:
                record = json.loads(raw)
                done[record["id"]] = record
            except (json.JSONDecodeError, UnicodeDecodeError, TypeError, KeyError):
                raise UserError(f"output {str(self.path)!r} line {n} is not a record of this tool; "
                                "it cannot be resumed (move it away and start again)") from None
        return done

    def append(self, record: dict) -> None:
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        view = memoryview(line)
        while view:  # one write for any sane line; a kill between writes leaves a torn line, cut on resume
            view = view[os.write(self.fd, view):]
        os.fsync(self.fd)
        self.done[record["id"]] = record

    def close(self) -> None:
        os.close(self.fd)


# ------------------------------------------------------------------------------------- replica
class Replica:
    """One pipeline: an Engine serving jobs. A plain object: the local worker process and the
    Ray actor are thin shells over it."""

    def __init__(self, defaults: dict):
        from runtime.engine import Engine
        self.defaults = load_run_config(None, **defaults)
        self.engine = Engine(self.defaults)

    def run(self, message: bytes) -> bytes:
        """{"jobs": [job, ...]} -> {"results": [record, ...]} (msgpack both ways). Several jobs are
        decoded together (runtime/batched.py), one alone through Engine.generate."""
        jobs = unpack(message)["jobs"]
        records, ready, outcomes = {}, [], []
        for job in jobs:
            try:
                ready.append((job, *self.prepare(job)))
            except UserError as e:
                records[job["id"]] = error_record(job["id"], job["line"], str(e))
        if len(ready) == 1:
            job, run, ids = ready[0]
            try:
                outcomes = [self.engine.generate(ids, run)]
            except (UserError, ValueError, RuntimeError) as e:
                outcomes = [e]
        elif ready:
            from runtime.batched import generate_batch
            outcomes = generate_batch(self.engine, [ids for _, _, ids in ready], [run for _, run, _ in ready]).results
        for (job, run, _), outcome in zip(ready, outcomes):
            record = records[job["id"]] = self.record(job, run, outcome)
            if record["status"] == "ok":
                record["stats"]["batch"] = len(ready)   # sequences decoded together with this one
        return pack({"results": [records[job["id"]] for job in jobs]})

    @staticmethod
    def record(job: dict, run: RunConfig, outcome) -> dict:
        if isinstance(outcome, (UserError, ValueError, RuntimeError)):   # RuntimeError: e.g. out of memory
            reason = str(outcome) if isinstance(outcome, UserError) else f"{type(outcome).__name__}: {outcome}"
            return error_record(job["id"], job["line"], reason)
        if isinstance(outcome, BaseException):   # a bug: surface it (the replica dies, the driver says why)
            raise outcome
        stats = dict(outcome.stats, prompt_tokens=outcome.prompt_tokens, stopped_by=outcome.stopped_by, mode=run.mode)
        return {"id": job["id"], "status": "ok", "error": None, "text": outcome.text, "token_ids": outcome.token_ids,
                "stats": stats, "line": job["line"]}

    def prepare(self, job: dict) -> tuple[RunConfig, list[int]]:
        """The job's RunConfig and prompt token ids (UserError: unreadable file, too long, ...)."""
        from runtime.cli import prompt_text
        run = _check_params(job["params"], self.defaults)
        if "messages" in job:
            tok = self.engine.tokenizer
            if not getattr(tok, "chat_template", None):
                raise UserError(f"the tokenizer of {str(self.engine.model_dir)!r} has no chat template; "
                                "send a prompt instead of messages")
            ids = tok.apply_chat_template(job["messages"], add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        else:
            text = prompt_text(dataclasses.replace(run, prompt=job.get("prompt"), prompt_file=job.get("prompt_file"),
                                                   kjv_books=()))
            ids = self.engine.encode(text, chat=run.chat)
        self.engine.check_length(len(ids), run.max_new_tokens)
        return run, ids


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this worker when the driver dies (even by SIGKILL), so no orphan
    keeps computing records nobody will write."""
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(0)


def local_worker(conn, defaults: dict, threads: int, parent: int) -> None:
    """A local replica process: receives msgpack jobs on its pipe, answers msgpack results."""
    _die_with_parent(parent)
    import torch
    torch.set_num_threads(threads)
    try:
        replica = Replica(defaults)
    except UserError as e:
        conn.send_bytes(pack({"fatal": str(e)}))
        return
    conn.send_bytes(pack({"ready": True}))
    while True:
        try:
            message = conn.recv_bytes(MAX_MESSAGE_BYTES)
        except EOFError:   # the driver is gone
            return
        conn.send_bytes(replica.run(message))


# --------------------------------------------------------------------------------------- pools
class LocalPool:
    """N replica processes (spawned: each loads its own Engine and uses `threads` cores)."""

    def __init__(self, n: int, defaults: dict, threads: int):
        import multiprocessing as mp
        self.ctx, self.defaults, self.threads = mp.get_context("spawn"), defaults, threads
        self.slots: list = [None] * n
        for slot in range(n):
            self.start(slot)

    def start(self, slot: int) -> None:
        mine, theirs = self.ctx.Pipe()
        proc = self.ctx.Process(target=local_worker, args=(theirs, self.defaults, self.threads, os.getpid()),
                                daemon=True, name=f"triforce-replica-{slot}")
        proc.start()
        theirs.close()
        self.slots[slot] = [proc, mine, False]   # process, pipe, ready

    def submit(self, slot: int, message: bytes) -> None:
        self.slots[slot][1].send_bytes(message)

    def wait(self, timeout: float) -> list[tuple[str, int, object]]:
        """Events: ("result", slot, bytes) | ("died", slot, reason) | ("ready", slot, None)."""
        from multiprocessing.connection import wait
        conns = {s[1]: i for i, s in enumerate(self.slots)}
        events = []
        for conn in wait(list(conns), timeout):
            slot = conns[conn]
            try:
                data = conn.recv_bytes(MAX_MESSAGE_BYTES)
            except (EOFError, OSError):
                proc = self.slots[slot][0]
                proc.join(5)
                events.append(("died", slot, f"replica process exited with code {proc.exitcode}"))
                continue
            message = unpack(data)
            if "fatal" in message:
                raise UserError(message["fatal"])
            if "ready" in message:
                self.slots[slot][2] = True
                events.append(("ready", slot, None))
            else:
                events.append(("result", slot, data))
        return events

    def restart(self, slot: int) -> None:
        proc, conn, _ = self.slots[slot]
        conn.close()
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        self.start(slot)

    def close(self) -> None:
        for proc, conn, _ in self.slots:
            conn.close()   # the worker sees EOF and returns
        for proc, _, _ in self.slots:
            proc.join(10)
            if proc.is_alive():
                proc.kill()


class RayPool:
    """N Ray actors, each a thin shell over Replica; one remote call per batch of jobs."""

    def __init__(self, n: int, defaults: dict, threads: int):
        import ray
        self.ray = ray
        if not ray.is_initialized():
            if os.environ.get("RAY_ADDRESS"):   # inside `ray job submit`, or pointed at a cluster
                ray.init()
            else:   # a private local Ray for this job ("local": never another session's `ray start` cluster)
                ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                         runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
        self.actor_cls = ray.remote(num_cpus=1, max_restarts=0)(RayReplica)
        self.defaults, self.threads = defaults, threads
        self.slots: list = [None] * n
        self.futures: dict = {}   # future -> slot
        for slot in range(n):
            self.start(slot)

    def start(self, slot: int) -> None:
        self.slots[slot] = self.actor_cls.remote(self.defaults, self.threads)

    def submit(self, slot: int, message: bytes) -> None:
        self.futures[self.slots[slot].run.remote(message)] = slot

    def wait(self, timeout: float) -> list[tuple[str, int, object]]:
        if not self.futures:
            time.sleep(min(timeout, 0.1))
            return []
        ready, _ = self.ray.wait(list(self.futures), num_returns=1, timeout=timeout)
        events = []
        for future in ready:
            slot = self.futures.pop(future)
            try:
                events.append(("result", slot, self.ray.get(future)))   # host sync: the result bytes
            except self.ray.exceptions.RayError as e:   # the actor died, or raised: surface it
                events.append(("died", slot, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
        return events

    def restart(self, slot: int) -> None:
        self.ray.kill(self.slots[slot])
        self.start(slot)

    def close(self) -> None:
        for actor in self.slots:
            self.ray.kill(actor)


class RayReplica:
    """The Ray actor: a Replica in a worker process with its own thread count."""

    def __init__(self, defaults: dict, threads: int):
        import torch
        torch.set_num_threads(threads)
        self.replica = Replica(defaults)

    def run(self, message: bytes) -> bytes:
        return self.replica.run(message)


# ------------------------------------------------------------------------------------ schedule
def schedule(jobs: list[dict], pool, jobs_per_call: int, on_record, on_event=None) -> None:
    """Hands jobs to the pool's replicas (jobs_per_call at a time) until every job has a record.
    A replica that dies puts its jobs back at the front of the queue and is replaced."""
    queue, in_flight, deaths = deque(jobs), {}, Counter()
    restarts, max_restarts = 0, 3 * len(pool.slots) + len(jobs)

    def feed(slot: int) -> None:
        batch = [queue.popleft() for _ in range(min(jobs_per_call, len(queue)))]
        if batch:
            in_flight[slot] = batch
            pool.submit(slot, pack({"jobs": batch}))

    if not isinstance(pool, LocalPool):   # Ray actors queue calls until they are up
        for slot in range(len(pool.slots)):
            feed(slot)
    while queue or in_flight:
        for kind, slot, payload in pool.wait(timeout=1.0):
            if kind == "ready":
                feed(slot)
            elif kind == "result":
                in_flight.pop(slot, None)
                for record in unpack(payload)["results"]:
                    on_record(record)
                feed(slot)
            elif kind == "died":
                restarts += 1
                if restarts > max_restarts:
                    raise UserError(f"replicas died {restarts} times; last: {payload}")
                for job in reversed(in_flight.pop(slot, [])):
                    deaths[job["id"]] += 1
                    if deaths[job["id"]] >= MAX_ATTEMPTS:
                        on_record(error_record(job["id"], job["line"], f"a replica died {deaths[job['id']]} times "
                                               f"while running this record (last: {payload})"))
                    else:
                        queue.appendleft(job)
                if on_event:
                    on_event(f"replica {slot} died ({payload}); its records went back to the queue")
                pool.restart(slot)
                if not isinstance(pool, LocalPool):
                    feed(slot)


# ------------------------------------------------------------------------------------ progress
def acceptance_of(record: dict) -> float | None:
    return record.get("stats", {}).get("levels", {}).get("target", {}).get("acceptance")


class Progress:
    """One status line on stderr: records done/total, tokens/s, mean acceptance, ETA."""

    def __init__(self, total: int, already: int):
        self.total, self.done, self.start = total, already, time.perf_counter()
        self.new_done, self.errors, self.tokens, self.acceptances, self.last_print = 0, 0, 0, [], 0.0
        self.tty = sys.stderr.isatty()

    def update(self, record: dict) -> None:
        self.done += 1
        self.new_done += 1
        self.errors += record["status"] != "ok"
        self.tokens += len(record.get("token_ids") or [])
        if acceptance_of(record) is not None:
            self.acceptances.append(acceptance_of(record))
        self.show()

    def show(self, force: bool = False) -> None:
        now = time.perf_counter()
        if not (force or self.tty or now - self.last_print >= 1.0 or self.done == self.total):
            return
        self.last_print = now
        elapsed = now - self.start
        rate = self.new_done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        acc = f"{sum(self.acceptances) / len(self.acceptances):.2f}" if self.acceptances else "-"
        bar_width = 20
        filled = int(bar_width * self.done / self.total)
        line = (f"[triforce] batch [{'#' * filled}{'.' * (bar_width - filled)}] {self.done}/{self.total} records "
                f"({self.errors} errors) | {self.tokens / elapsed if elapsed > 0 else 0:.1f} tok/s | "
                f"acceptance {acc} | ETA {_duration(eta)}")
        print(line, file=sys.stderr, end="\r" if self.tty else "\n", flush=True)

    def note(self, message: str) -> None:
        print(f"\n[triforce] {message}" if self.tty else f"[triforce] {message}", file=sys.stderr, flush=True)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


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
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = summary["per_record"]
    for key, label, name in (("decode_tokens_per_s", "decode tokens/s", "tokens_per_s.png"),
                             ("acceptance", "target acceptance", "acceptance.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in sorted({r["mode"] for r in rows}):
            pts = [(r["prompt_tokens"], r[key]) for r in rows if r["mode"] == mode and r[key] is not None]
            if pts:
                ax.scatter(*zip(*pts), label=mode, s=12)
        ax.set_xlabel("prompt tokens")
        ax.set_ylabel(label)
        ax.set_title(f"{label} per record")
        if ax.get_legend_handles_labels()[0]:
            ax.legend()
        fig.tight_layout()
        fig.savefig(report_dir / name, dpi=100)
        plt.close(fig)
        written.append(report_dir / name)
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
RUN_FLAGS = SHARED_RUN_FLAGS + ("batch_size",)


def add_batch_parser(sub) -> None:
    from runtime.cli import add_run_args
    p = sub.add_parser("batch", help="run a JSONL file of requests: durable, resumable, with replicas")
    p.add_argument("--input", required=True, help='JSONL: one {"id", "prompt" | "prompt_file" | "messages", ...} per line')
    p.add_argument("--output", required=True, help="JSONL of results, appended as records finish")
    p.add_argument("--config", help="YAML file of run settings: defaults for every record (flags override it)")
    p.add_argument("--resume", action="store_true", help="continue into an existing --output, skipping done ids")
    p.add_argument("--replicas", type=int, default=1, help="independent pipelines pulling from the queue")
    p.add_argument("--backend", choices=("local", "ray"), default="local", help="replicas as local processes or Ray actors")
    p.add_argument("--threads", type=int, help="torch threads per replica (default: cores / replicas)")
    p.add_argument("--report", help="report directory (default: OUTPUT with .report instead of its suffix)")
    add_run_args(p)  # the run defaults, as `triforce generate` spells them
    p.add_argument("--batch-size", type=int, help="sequences each replica decodes together (default 1)")
    p.set_defaults(func=cmd_batch)


def cmd_batch(args: argparse.Namespace) -> int:
    from runtime.config import ModelConfig
    from runtime.engine import resolve_model_dir
    if args.replicas < 1:
        raise UserError(f"--replicas {args.replicas} must be at least 1")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads {args.threads} must be at least 1")
    defaults = load_run_config(args.config, **{k: getattr(args, k) for k in RUN_FLAGS})
    defaults = dataclasses.replace(defaults, prompt=None, prompt_file=None, kjv_books=())  # records carry prompts
    ModelConfig.from_dir(resolve_model_dir(defaults.model))   # a bad --model fails here, not in N replicas
    input_path, output_path = Path(args.input).expanduser(), Path(args.output).expanduser()
    jobs, errors, total = read_jobs(input_path, defaults)
    output = OutputFile(output_path, resume=args.resume)
    try:
        return _run_batch(args, defaults, jobs, errors, total, output, output_path)
    finally:
        output.close()


def _run_batch(args, defaults, jobs, errors, total, output, output_path) -> int:
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
            schedule(todo, pool, defaults.batch_size, on_record, on_event=progress.note)
        finally:
            pool.close()
    progress.show(force=True)
    if progress.tty:
        print(file=sys.stderr)
    wall = time.perf_counter() - start
    ids = {j["id"] for j in [*jobs, *errors]}
    records = [r for i, r in output.done.items() if i in ids]
    summary = summarize(records, wall, progress.tokens)
    report_dir = Path(args.report).expanduser() if args.report else output_path.with_suffix(".report")
    files = write_report(report_dir, summary)
    print(f"[triforce] {summary_table(summary)}".replace("\n", "\n[triforce] "), file=sys.stderr)
    print(f"[triforce] output {str(output_path)!r}; report {', '.join(str(f) for f in files)}", file=sys.stderr,
          flush=True)
    return 0
