"""`triforce batch`, replicas: a Replica serves jobs over its own Engine; pools of local processes
or Ray actors run them; `schedule` hands jobs out and takes records back.

Isolation: a record that fails inside a batch is run again alone (in the replica, and by the
driver when a replica dies with a batch), so its neighbours are unaffected. Deadlines: a replica
must be ready within start_timeout and answer a call within call_timeout, else it is killed and
replaced. A replica that fails to start max_start_failures times in a row fails the job with the
load error in one line; a sticky device error (CUDA) kills the replica rather than poisoning the
records after it.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import sys
import time
from collections import Counter, deque
from dataclasses import dataclass

from triforce.runtime.batch_input import MAX_MESSAGE_BYTES, check_params, error_record, pack, unpack
from triforce.runtime.config import RunConfig, load_run_config
from triforce.runtime.errors import UserError

JOBS_PER_SLOT = 4              # a batched call (--batch-size B > 1) carries up to B x this many jobs: B decode
                               # at once and a finished one's slot takes the next (decode_batched.generate_batch)
AFFINITY_WINDOW = 256          # queued jobs --prefix-cache routing looks through for a replica's document
AFFINITY_CHARS = 4096          # characters of a prompt that routing compares (~1,000 tokens: one prefill pass)
MAX_ATTEMPTS = 2               # replica deaths a job run alone may cause before it is recorded as an error
STICKY_DEVICE_ERRORS = ("CUDA error", "device-side assert", "CUBLAS_STATUS", "cuDNN error", "NCCL error")


class ReplicaBroken(Exception):
    """The replica's device is unusable (a sticky CUDA error): it must exit and be replaced."""


@dataclass(frozen=True)
class Limits:
    call_timeout: float = 3600.0    # seconds a replica may take to answer one call (a batch of jobs)
    start_timeout: float = 900.0    # seconds a replica may take to load its model and say ready
    max_start_failures: int = 3     # replica starts failing in a row before the job fails


# ------------------------------------------------------------------------------------- replica
def is_sticky(error: BaseException) -> bool:
    return isinstance(error, RuntimeError) and any(s in str(error) for s in STICKY_DEVICE_ERRORS)


def describe(error: BaseException) -> str:
    if isinstance(error, UserError):
        return str(error)
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text[:500]}"


class Replica:
    """One pipeline: an Engine serving jobs. A plain object: the local worker process and the
    Ray actor are thin shells over it. Any exception a record raises becomes that record's error
    (named by type and message); only a sticky device error escapes (ReplicaBroken)."""

    def __init__(self, defaults: dict):
        from triforce.runtime.engine import Engine
        self.defaults = load_run_config(None, **defaults)
        self.engine = Engine(self.defaults, keep_prefill=self.defaults.prefix_cache)
        vocab = self.engine.tokenizer.get_vocab() if hasattr(self.engine.tokenizer, "get_vocab") else {}
        # bytes a prompt may hold and still fit: no token is longer than the longest vocabulary entry
        # (byte-level BPE: one character per byte); x4 leaves room for multi-byte spellings
        self.max_prompt_bytes = self.engine.cfg.max_context * 4 * max((len(t) for t in vocab), default=64)

    def run(self, message: bytes) -> bytes:
        """{"jobs": [job, ...]} -> {"results": [record, ...]} (msgpack both ways). Several jobs are
        decoded together (runtime/decode_batched.py), one alone through Engine.generate; a job that fails
        inside a batch is run again alone."""
        jobs = unpack(message)["jobs"]
        records, ready = {}, []
        for job in jobs:
            try:
                ready.append((job, *self.prepare(job)))
            except ReplicaBroken:
                raise
            except Exception as e:   # noqa: BLE001 -- becomes this record's error, named
                self._check_sticky(e)
                records[job["id"]] = error_record(job["id"], job["line"], describe(e))
        outcomes = self.generate(ready)
        for (job, run, ids), outcome in zip(ready, outcomes):
            together = min(len(ready), max(1, self.defaults.batch_size))   # sequences that decoded at once
            if isinstance(outcome, BaseException) and not isinstance(outcome, UserError) and len(ready) > 1:
                outcome, together = self.generate([(job, run, ids)])[0], 1   # alone: a neighbour may have caused it
            self._check_sticky(outcome)
            record = records[job["id"]] = self.record(job, run, outcome)
            if record["status"] == "ok":
                record["stats"]["batch"] = together   # sequences decoded together with this one
        return self.pack_results([records[job["id"]] for job in jobs])

    def generate(self, ready: list) -> list:
        """Per job: its Result, or the exception it raised."""
        if len(ready) == 1:
            _, run, ids = ready[0]
            try:
                return [self.engine.generate(ids, run)]
            except Exception as e:   # noqa: BLE001 -- handed back as the record's outcome
                return [e]
        if not ready:
            return []
        from triforce.runtime.decode_batched import generate_batch
        try:
            return generate_batch(self.engine, [ids for _, _, ids in ready], [run for _, run, _ in ready],
                                  slots=self.defaults.batch_size).results
        except Exception as e:   # noqa: BLE001 -- the batch as a whole failed: each job is retried alone
            return [e] * len(ready)

    @staticmethod
    def _check_sticky(outcome) -> None:
        if isinstance(outcome, BaseException) and is_sticky(outcome):
            raise ReplicaBroken(describe(outcome)) from outcome

    @staticmethod
    def pack_results(records: list[dict]) -> bytes:
        """msgpack of the records; a record the wire refuses becomes an error record."""
        for i, record in enumerate(records):
            try:
                pack(record)
            except ValueError as e:
                records[i] = error_record(record["id"], record["line"], f"result cannot be sent: {e}")
        return pack({"results": records})

    @staticmethod
    def record(job: dict, run: RunConfig, outcome) -> dict:
        if isinstance(outcome, BaseException):
            return error_record(job["id"], job["line"], describe(outcome))
        stats = dict(outcome.stats, prompt_tokens=outcome.prompt_tokens, stopped_by=outcome.stopped_by, mode=run.mode)
        return {"id": job["id"], "status": "ok", "error": None, "text": outcome.text, "token_ids": outcome.token_ids,
                "stats": stats, "line": job["line"]}

    def prepare(self, job: dict) -> tuple[RunConfig, list[int]]:
        """The job's RunConfig and prompt token ids (UserError: unreadable file, too long, ...)."""
        from triforce.runtime.run_args import prompt_text
        run = check_params(job["params"], self.defaults)
        if "messages" in job:
            tok = self.engine.tokenizer
            if not getattr(tok, "chat_template", None):
                raise UserError(f"the tokenizer of {str(self.engine.model_dir)!r} has no chat template; "
                                "send a prompt instead of messages")
            self._check_size(sum(len(m["content"].encode()) for m in job["messages"]), "messages")
            ids = tok.apply_chat_template(job["messages"], add_generation_prompt=True, tokenize=True)
            ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        else:
            if job.get("prompt_file"):
                self._check_size(self._file_size(job["prompt_file"]), "prompt file")
            else:
                self._check_size(len(job["prompt"].encode()), "prompt")
            text = prompt_text(dataclasses.replace(run, prompt=job.get("prompt"), prompt_file=job.get("prompt_file"),
                                                   kjv_books=()))
            ids = self.engine.encode(text, chat=run.chat)
        self.engine.check_length(len(ids), run.max_new_tokens)
        return run, ids

    @staticmethod
    def _file_size(path: str) -> int:
        try:
            return os.stat(path).st_size
        except FileNotFoundError:
            raise UserError(f"prompt file {path!r} does not exist") from None
        except OSError as e:
            raise UserError(f"prompt file {path!r} cannot be read ({e.strerror})") from None

    def _check_size(self, size: int, what: str) -> None:
        """Refuses, before tokenizing, a text that cannot fit the model's positions whatever its tokens."""
        if size > self.max_prompt_bytes:
            raise UserError(f"{what} of {size} bytes cannot fit the model's {self.engine.cfg.max_context} "
                            f"positions; shorten it")


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
    except UserError as e:   # the same for every replica: the job fails at once
        _send(conn, pack({"fatal": str(e)}))
        return
    except Exception as e:   # noqa: BLE001 -- a load failure (truncated file, out of memory): the driver counts it
        _send(conn, pack({"start_failed": describe(e)}))
        return
    _send(conn, pack({"ready": True}))
    while True:
        try:
            message = conn.recv_bytes(MAX_MESSAGE_BYTES)
        except (EOFError, OSError):   # the driver is gone, or closed this replica
            return
        try:
            answer = replica.run(message)
        except ReplicaBroken as e:
            print(f"[triforce] replica exits: {e}", file=sys.stderr, flush=True)
            os._exit(70)
        _send(conn, answer)


def _send(conn, data: bytes) -> None:
    """Sends to the driver; a driver that has gone (or closed this replica) ends the process quietly."""
    try:
        conn.send_bytes(data)
    except OSError:   # BrokenPipeError: nobody is listening any more
        os._exit(0)


# --------------------------------------------------------------------------------------- pools
class LocalPool:
    """N replica processes (spawned: each loads its own Engine and uses `threads` cores).
    Events from wait(): ("ready", slot, None) | ("result", slot, bytes) | ("died", slot, reason) |
    ("start_failed", slot, reason)."""

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
        try:
            self.slots[slot][1].send_bytes(message)
        except OSError:   # the process is gone; wait() reports it
            pass

    def wait(self, timeout: float) -> list[tuple[str, int, object]]:
        from multiprocessing.connection import wait
        conns = {s[1]: i for i, s in enumerate(self.slots)}
        events = []
        for conn in wait(list(conns), timeout):
            slot = conns[conn]
            events.append(self._event(slot, conn))
        return events

    def _event(self, slot: int, conn) -> tuple[str, int, object]:
        proc, _, ready = self.slots[slot]
        try:
            data = conn.recv_bytes(MAX_MESSAGE_BYTES)
            message = unpack(data)
        except (EOFError, OSError, ValueError) as e:
            proc.join(5)
            reason = f"replica process exited with code {proc.exitcode}" if proc.exitcode is not None else \
                f"replica sent a bad message ({e})"
            return ("died" if ready else "start_failed", slot, reason)
        if "fatal" in message:
            raise UserError(message["fatal"])
        if "start_failed" in message:
            return ("start_failed", slot, message["start_failed"])
        if "ready" in message:
            self.slots[slot][2] = True
            return ("ready", slot, None)
        return ("result", slot, data)

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
                proc.join(5)


class RayPool:
    """N Ray actors, each a thin shell over Replica; one remote call per batch of jobs. Each new
    actor is asked ready() first, so that a load failure is told apart from a record's."""

    def __init__(self, n: int, defaults: dict, threads: int):
        from triforce.actors.client import connect_ray
        import ray
        self.ray = ray
        connect_ray(num_cpus=os.cpu_count() or 1)
        cpus = ray.cluster_resources().get("CPU", 0)
        if n > cpus:
            raise UserError(f"--replicas {n} needs {n} CPUs but the Ray cluster has {cpus:g}; lower --replicas "
                            "or add nodes")
        self.actor_cls = ray.remote(num_cpus=1, max_restarts=0)(RayReplica)
        self.defaults, self.threads = defaults, threads
        self.slots: list = [None] * n
        self.futures: dict = {}   # future -> (slot, "ready" | "run")
        for slot in range(n):
            self.start(slot)

    def start(self, slot: int) -> None:
        self.slots[slot] = self.actor_cls.remote(self.defaults, self.threads)
        self.futures[self.slots[slot].ready.remote()] = (slot, "ready")

    def submit(self, slot: int, message: bytes) -> None:
        self.futures[self.slots[slot].run.remote(message)] = (slot, "run")

    def wait(self, timeout: float) -> list[tuple[str, int, object]]:
        if not self.futures:
            time.sleep(min(timeout, 0.1))
            return []
        ready, _ = self.ray.wait(list(self.futures), num_returns=1, timeout=timeout)
        events = []
        for future in ready:
            slot, kind = self.futures.pop(future)
            try:
                value = self.ray.get(future, timeout=60)   # host sync: the result bytes (already done)
            except self.ray.exceptions.RayError as e:   # the actor died, or raised: surface it
                cause = getattr(e, "cause", None)
                if kind == "ready" and isinstance(cause, UserError):
                    raise UserError(str(cause)) from None
                reason = describe(cause) if isinstance(cause, BaseException) else describe(e)
                events.append(("start_failed" if kind == "ready" else "died", slot, reason))
                continue
            events.append(("ready", slot, None) if kind == "ready" else ("result", slot, value))
        return events

    def restart(self, slot: int) -> None:
        for future, (s, _) in list(self.futures.items()):
            if s == slot:
                del self.futures[future]
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

    def ready(self) -> bool:
        return True

    def run(self, message: bytes) -> bytes:
        try:
            return self.replica.run(message)
        except ReplicaBroken:
            import ray
            ray.actor.exit_actor()   # the driver sees the actor die and starts a fresh one
            raise


# ------------------------------------------------------------------------------------ schedule
class Scheduler:
    """Hands jobs to the pool's replicas (jobs_per_call at a time) until every job has a record.

    A replica that dies (or misses a deadline) with several jobs puts them back as jobs to run
    alone, uncounted; a job that kills a replica while alone MAX_ATTEMPTS times becomes a
    retryable error record. Starts failing max_start_failures times in a row fail the job."""

    def __init__(self, jobs: list[dict], pool, jobs_per_call: int, on_record, on_event=None,
                 limits: Limits = Limits(), affinity: bool = False):
        self.queue = deque((job, False) for job in jobs)   # (job, alone)
        # affinity (--prefix-cache, one job a call, several replicas): a replica keeps its last
        # prefill, so it gets the next job whose prompt starts as its last one did (prompt_start)
        self.affinity = affinity and jobs_per_call == 1 and len(pool.slots) > 1
        self.start_of: dict = {}       # slot -> prompt_start of the last job it was sent
        self.pool, self.jobs_per_call, self.on_record, self.on_event, self.limits = \
            pool, jobs_per_call, on_record, on_event, limits
        self.in_flight: dict = {}      # slot -> [job, ...]
        self.sent_at: dict = {}        # slot -> time.monotonic() of the call in flight
        self.started_at = {slot: time.monotonic() for slot in range(len(pool.slots))}   # slots not yet ready
        self.deaths, self.start_failures, self.restarts = Counter(), 0, 0
        # every job can cost at most MAX_ATTEMPTS deaths alone plus one in a batch: beyond this,
        # replicas die of something else (idle crashes), and the job stops instead of cycling
        self.max_restarts = 3 * len(pool.slots) + (MAX_ATTEMPTS + 1) * len(jobs)

    def run(self) -> None:
        while self.queue or self.in_flight:
            for kind, slot, payload in self.pool.wait(timeout=1.0):
                getattr(self, f"on_{kind}")(slot, payload)
            self.check_deadlines()

    def feed(self, slot: int) -> None:
        if not self.queue:
            return
        if self.queue[0][1]:
            batch = [self.queue.popleft()[0]]
        elif self.affinity:
            batch = [self.take(self.pick(slot))]
            self.start_of[slot] = prompt_start(batch[0])
        else:
            batch = []
            while self.queue and not self.queue[0][1] and len(batch) < self.jobs_per_call:
                batch.append(self.queue.popleft()[0])
        self.in_flight[slot] = batch
        self.sent_at[slot] = time.monotonic()
        self.pool.submit(slot, pack({"jobs": batch}))

    def pick(self, slot: int) -> int:
        """The queue index (among its first AFFINITY_WINDOW jobs) of the job for `slot`: the first
        whose prompt starts as the slot's last one did, else the first whose start no other replica
        holds, else the first: no replica waits for a document another one holds."""
        mine = self.start_of.get(slot)
        held = {start for other, start in self.start_of.items() if other != slot}
        free = None
        for i, (job, alone) in enumerate(itertools.islice(self.queue, AFFINITY_WINDOW)):
            if alone:
                break
            start = prompt_start(job)
            if start == mine:
                return i
            if free is None and start not in held:
                free = i
        return free if free is not None else 0

    def take(self, index: int) -> dict:
        job = self.queue[index][0]
        del self.queue[index]
        return job

    def on_ready(self, slot: int, _) -> None:
        self.started_at.pop(slot, None)
        self.start_failures = 0
        self.feed(slot)

    def on_result(self, slot: int, payload: bytes) -> None:
        batch = self.in_flight.pop(slot, [])
        self.sent_at.pop(slot, None)
        try:
            results = unpack(payload)["results"]
            by_id = {r["id"]: r for r in results}
            records = [by_id[job["id"]] for job in batch]
        except (ValueError, KeyError, TypeError) as e:
            self.in_flight[slot] = batch
            self.on_died(slot, f"replica answered a malformed message ({describe(e)})")
            return
        for record in records:
            self.on_record(record)
        self.feed(slot)

    def on_start_failed(self, slot: int, reason: str) -> None:
        self.start_failures += 1
        if self.start_failures >= self.limits.max_start_failures:
            raise UserError(f"a replica failed to start {self.start_failures} times in a row; last: {reason}")
        self.note(f"replica {slot} failed to start ({reason}); starting it again")
        self.pool.restart(slot)
        self.started_at[slot] = time.monotonic()

    def on_died(self, slot: int, reason: str) -> None:
        self.start_of.pop(slot, None)   # its saved prefill died with it
        self.restarts += 1
        if self.restarts > self.max_restarts:
            raise UserError(f"replicas died {self.restarts} times, more than the records explain; last: {reason}")
        batch = self.in_flight.pop(slot, [])
        self.sent_at.pop(slot, None)
        if len(batch) > 1:
            self.queue.extendleft((job, True) for job in reversed(batch))   # each alone, uncounted
        for job in batch if len(batch) == 1 else ():
            self.deaths[job["id"]] += 1
            if self.deaths[job["id"]] >= MAX_ATTEMPTS:
                self.on_record(error_record(job["id"], job["line"], f"a replica died {self.deaths[job['id']]} times "
                                            f"while running this record (last: {reason})", retryable=True))
            else:
                self.queue.appendleft((job, True))
        self.note(f"replica {slot} died ({reason}); its records went back to the queue")
        self.pool.restart(slot)
        self.started_at[slot] = time.monotonic()

    def check_deadlines(self) -> None:
        now = time.monotonic()
        for slot, sent in list(self.sent_at.items()):
            if now - sent > self.limits.call_timeout:
                self.on_died(slot, f"no answer within {self.limits.call_timeout:g} s (call_timeout)")
        for slot, started in list(self.started_at.items()):
            if now - started > self.limits.start_timeout:
                self.on_start_failed(slot, f"not ready within {self.limits.start_timeout:g} s (start_timeout)")

    def note(self, message: str) -> None:
        if self.on_event:
            self.on_event(message)


def jobs_per_call(batch_size: int) -> int:
    """Jobs handed to a replica per call: one unbatched, else JOBS_PER_SLOT per sequence slot, so
    that slots refill as sequences finish (a fixed batch of B ends with sequences decoding alone)."""
    return 1 if batch_size <= 1 else batch_size * JOBS_PER_SLOT


def prompt_start(job: dict) -> tuple:
    """What a job's prompt starts with, as far as routing looks (a heuristic: the replica compares
    the tokens): its file, or the first AFFINITY_CHARS characters of its text or messages."""
    if "prompt_file" in job:
        return ("file", job["prompt_file"])
    if "prompt" in job:
        return ("text", job["prompt"][:AFFINITY_CHARS])
    return ("messages", repr(job.get("messages"))[:AFFINITY_CHARS])


def schedule(jobs: list[dict], pool, jobs_per_call: int, on_record, on_event=None, limits: Limits = Limits(),
             affinity: bool = False) -> None:
    Scheduler(jobs, pool, jobs_per_call, on_record, on_event, limits, affinity).run()

