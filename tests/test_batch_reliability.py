"""`triforce batch` against malformed and adversarial input, concurrent jobs, changed settings,
replicas that cannot load, and kills: every record ends as exactly one output line, and the job
finishes (or stops with one line naming the cause)."""
import json
import os
import random
import shutil
import time
from pathlib import Path

import pytest

from triforce.runtime.batch import OutputFile, Replica, error_record, pack, read_jobs, schedule, unpack
from triforce.runtime.batch_output import manifest_for
from triforce.runtime.batch_replicas import Limits
from triforce.runtime.cli import main
from triforce.runtime.config import RunConfig

DEEP = "[" * 100_000 + "]" * 100_000


def adversarial_lines(rng: random.Random) -> list[str]:
    """Lines that once crashed the driver or a replica, then random mutations of good records."""
    fixed = [
        '{"id": "seed64", "prompt": "x", "seed": 18446744073709551616}',
        '{"id": "mnt64", "prompt": "x", "max_new_tokens": 18446744073709551616}',
        '{"id": "topk64", "prompt": "x", "top_k": 18446744073709551617}',
        '{"id": "seedneg", "prompt": "x", "seed": -9223372036854775809}',
        '{"id": "temp400", "prompt": "x", "temperature": 1' + "0" * 400 + "}",
        '{"id": "digits", "prompt": "x", "seed": 1' + "0" * 5000 + "}",
        '{"id": "nan", "prompt": "x", "temperature": NaN}',
        '{"id": "inf", "prompt": "x", "top_p": Infinity}',
        '{"id": "ninf", "prompt": "x", "temperature": -Infinity}',
        '{"id": "exp", "prompt": "x", "temperature": 1e400}',
        DEEP,
        '{"id": "deep", "prompt": ' + DEEP + "}",
        '{"id": "\\ud800", "prompt": "x"}',
        '{"id": "surrogate-prompt", "prompt": "a\\udfffb"}',
        '{"id": "surrogate-msg", "messages": [{"role": "user", "content": "\\ud83d"}]}',
        '{"id": "surrogate-role", "messages": [{"role": "\\ud800", "content": "hi"}]}',
        '{"id": "surrogate-mode", "prompt": "x", "mode": "\\ud800"}',
        '{"id": "surrogate-file", "prompt_file": "\\ud800.txt"}',
        '{"id": "nul-file", "prompt_file": "a\\u0000b"}',
        '{"id": "long-file", "prompt_file": "' + "a" * 5000 + '"}',
        '{"id": "bool-seed", "prompt": "x", "seed": true}',
        '{"id": "list-prompt", "prompt": ["x"]}',
        '{"id": "dict-msgs", "messages": {"role": "user"}}',
        '{"id": "msg-extra", "messages": [{"role": "user", "content": "hi", "x": {"y": 1}}]}',
        '{"id": "float-mnt", "prompt": "x", "max_new_tokens": 1.5}',
        '{"id": "str-temp", "prompt": "x", "temperature": "hot"}',
        '{"id": "null", "prompt": null}',
        '{"id": "' + "i" * 5000 + '", "prompt": "x"}',
        '{"id": {"nested": 1}, "prompt": "x"}',
        '{"\\ud800": 1, "id": "badkey", "prompt": "x"}',
        "null", "7", '"text"', "{}", "[]", "\x00\x01", "{\"id\": \"trunc\", \"prompt\": \"x",
        '{"id": "big", "prompt": "' + "word " * 2_000_000 + '"}',   # 10 MB prompt
        '{"id": "ok-1", "prompt": "The capital of France is", "max_new_tokens": 1}',
        '{"id": "ok-2", "prompt": "Once upon a time", "max_new_tokens": 2, "temperature": 0.7, "seed": 9223372036854775807}',
        '{"id": "ok-3", "messages": [{"role": "user", "content": "Hi"}], "max_new_tokens": 1, "top_k": 2147483647}',
    ]
    base = {"id": "m", "prompt": "Hello there", "max_new_tokens": 1}
    values = [None, True, -1, 0, 2**64, -2**63 - 1, 1e308, float("nan"), "", "\ud800", [], {}, [[[]]], "x" * 300]
    mutated = []
    for n in range(40):
        record = dict(base, id=f"fuzz-{n}")
        record[rng.choice(["prompt", "max_new_tokens", "temperature", "top_p", "top_k", "seed", "mode",
                           "messages", "prompt_file", "extra"])] = rng.choice(values)
        mutated.append(json.dumps(record, allow_nan=True))
    return fixed + mutated


def test_read_jobs_survives_every_malformed_line(tmp_path):
    lines = adversarial_lines(random.Random(0))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    jobs, errors, total = read_jobs(path, RunConfig())
    assert total == len(lines) == len(jobs) + len(errors)
    by_id = {r["id"]: r["error"] for r in errors}
    for job_id, needle in [("seed64", "seed 18446744073709551616 must be between 0 and"),
                           ("mnt64", "max_new_tokens"), ("topk64", "top_k"), ("seedneg", "seed"),
                           ("temp400", "too large"), ("nan", "must be finite"), ("inf", "must be finite"),
                           ("exp", "must be finite"), ("<line 11>", "nested too deeply"), ("<line 12>", "nested too deeply"),
                           ("<line 13>", "not valid UTF-8"), ("surrogate-prompt", "prompt is not valid UTF-8"),
                           ("surrogate-msg", "messages[0].content is not valid UTF-8"),
                           ("surrogate-mode", "mode is not valid UTF-8"), ("bool-seed", "must be an int"),
                           ("<line 6>", "malformed JSON"), ("nul-file", "NUL")]:
        assert needle in by_id[job_id], (job_id, by_id[job_id])
    assert {"ok-1", "ok-2", "ok-3", "big"} <= {j["id"] for j in jobs}
    for record in errors:   # every error record can be written and sent
        json.loads(json.dumps(record, ensure_ascii=False).encode("utf-8").decode())
        assert unpack(pack(record)) == record
    for job in jobs:   # every accepted job can be sent to a replica
        assert unpack(pack({"jobs": [job]}))["jobs"][0] == job


@pytest.fixture(scope="module")
def replica(default_model_dir, one_thread):
    return Replica({"model": str(default_model_dir), "max_new_tokens": 2})


@pytest.mark.parametrize("batch_size", [1, 2, 3, 5])
def test_replica_answers_every_accepted_job_in_every_batch_size(replica, tmp_path, batch_size):
    lines = adversarial_lines(random.Random(1))
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    jobs, _, _ = read_jobs(path, RunConfig(max_new_tokens=2))
    for start in range(0, len(jobs), batch_size):
        batch = jobs[start:start + batch_size]
        records = unpack(replica.run(pack({"jobs": batch})))["results"]
        assert [r["id"] for r in records] == [j["id"] for j in batch]
        by_id = {r["id"]: r for r in records}
    results = {}
    for start in range(0, len(jobs), batch_size):
        for r in unpack(replica.run(pack({"jobs": jobs[start:start + batch_size]})))["results"]:
            results[r["id"]] = r
    assert results["big"]["status"] == "error" and "cannot fit" in results["big"]["error"]
    assert all(results[i]["status"] == "ok" for i in ("ok-1", "ok-2", "ok-3")), by_id


def test_a_record_failing_in_a_batch_is_retried_alone(replica, monkeypatch):
    """The packed batch raises (as if one sequence broke it); each record then runs alone."""
    import triforce.runtime.decode_batched

    def broken(*args, **kwargs):
        raise RuntimeError("packed pass failed")
    monkeypatch.setattr(triforce.runtime.decode_batched, "generate_batch", broken)
    jobs = [{"line": n, "id": f"r{n}", "prompt": p, "params": {"max_new_tokens": 2}}
            for n, p in enumerate(["Hello", "The capital of France is", "One two three"], 1)]
    records = unpack(replica.run(pack({"jobs": jobs})))["results"]
    assert [r["status"] for r in records] == ["ok"] * 3
    alone = [unpack(replica.run(pack({"jobs": [j]})))["results"][0] for j in jobs]
    assert [r["token_ids"] for r in records] == [r["token_ids"] for r in alone]


class BatchKillerPool:
    """Slot dies on any call holding the poison id; otherwise answers ok."""

    def __init__(self, poison: str, slots: int = 2):
        self.slots, self.poison, self.events, self.calls = [None] * slots, poison, [], []
        self.events = [("ready", s, None) for s in range(slots)]

    def submit(self, slot, message):
        jobs = unpack(message)["jobs"]
        self.calls.append([j["id"] for j in jobs])
        if any(j["id"] == self.poison for j in jobs):
            self.events.append(("died", slot, "killed by poison"))
        else:
            self.events.append(("result", slot, pack({"results": [
                {"id": j["id"], "status": "ok", "token_ids": [1], "line": j["line"]} for j in jobs]})))

    def wait(self, timeout):
        events, self.events = self.events, []
        return events

    def restart(self, slot):
        self.events.append(("ready", slot, None))


def test_a_replica_dying_with_a_batch_costs_its_neighbours_nothing():
    jobs = [{"id": f"j{i}", "line": i, "prompt": "x", "params": {}} for i in range(7)]
    pool = BatchKillerPool("j2")
    records = []
    schedule(jobs, pool, 4, records.append)
    status = {r["id"]: r["status"] for r in records}
    assert sorted(status) == sorted(j["id"] for j in jobs) and len(records) == len(jobs)
    assert status.pop("j2") == "error" and set(status.values()) == {"ok"}
    poison = next(r for r in records if r["id"] == "j2")
    assert poison["retryable"] is True and "replica died 2 times" in poison["error"]


class SlotRecordingPool(BatchKillerPool):
    """Answers ok at once and records which slot got which job; slot 1 answers last, so each
    round of results frees slot 0 first."""

    def __init__(self, slots: int = 2):
        super().__init__("none", slots)
        self.sent = []

    def submit(self, slot, message):
        self.sent.append((slot, [j["id"] for j in unpack(message)["jobs"]]))
        super().submit(slot, message)


def test_prefix_cache_routes_a_documents_questions_to_the_replica_that_holds_it():
    """--prefix-cache with two replicas: each takes one document's questions (two prefills, not
    four), whatever order they came in; a document no one holds goes to a free replica, and
    without the flag the queue's order stands."""
    doc = {"d1": "First document. " * 400, "d2": "Second document. " * 400}
    order = ["d1", "d1", "d2", "d1", "d2", "d2"]
    jobs = [{"id": f"{d}-q{n}", "line": n, "prompt": doc[d] + f" Question {n}?", "params": {}}
            for n, d in enumerate(order)]
    pool = SlotRecordingPool()
    records = []
    schedule(jobs, pool, 1, records.append, affinity=True)
    assert sorted(r["id"] for r in records) == sorted(j["id"] for j in jobs)
    by_slot = {slot: {i.split("-")[0] for _, ids in pool.sent if _ == slot for i in ids} for slot, _ in pool.sent}
    assert by_slot == {0: {"d1"}, 1: {"d2"}}
    plain = SlotRecordingPool()
    schedule(jobs, plain, 1, [].append)
    assert [ids[0] for _, ids in plain.sent] == [j["id"] for j in jobs]
    one_doc = SlotRecordingPool()   # more replicas than documents: none waits
    schedule(jobs[:2], one_doc, 1, [].append, affinity=True)
    assert sorted(slot for slot, _ in one_doc.sent) == [0, 1]


class HungPool(BatchKillerPool):
    """Never answers the first call of slot 0."""

    def submit(self, slot, message):
        if not self.calls:
            self.calls.append(["hung"])
            return
        super().submit(slot, message)


def test_a_hung_replica_misses_its_deadline_and_is_replaced():
    jobs = [{"id": f"j{i}", "line": i, "prompt": "x", "params": {}} for i in range(3)]
    records, notes = [], []
    start = time.monotonic()
    schedule(jobs, HungPool("none", slots=1), 1, records.append, notes.append, Limits(call_timeout=0.5))
    assert sorted(r["id"] for r in records) == ["j0", "j1", "j2"] and time.monotonic() - start < 10
    assert any("no answer within 0.5 s" in n for n in notes)


# --------------------------------------------------------------------------- output: lock, manifest
def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


def errors_only_input(tmp_path: Path) -> Path:
    """Records that all fail validation: a job that needs no replica (fast), yet writes output."""
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "prompt": "x", "top_p": 2}\n{"id": "b"}\n')
    return path


def test_a_second_job_on_the_same_output_stops_at_once(capsys, tmp_path):
    inp, out = errors_only_input(tmp_path), tmp_path / "out.jsonl"
    holder = OutputFile(out, resume=False)
    holder.append(error_record("a", 1, "first job's record"))
    before = out.read_bytes()
    start = time.monotonic()
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(out), "--resume")
    assert code == 2 and "is in use by another job" in err and f"pid {os.getpid()}" in err
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - start < 30
    holder.append(error_record("b", 2, "still writing"))
    holder.close()
    assert out.read_bytes().startswith(before) and len(out.read_text().splitlines()) == 2
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(tmp_path / "o2.jsonl"))
    assert code == 0   # the lock is released with the job


def test_resume_with_another_mode_is_refused_and_the_file_untouched(capsys, tmp_path):
    inp, out = errors_only_input(tmp_path), tmp_path / "out.jsonl"
    code, _ = run_cli(capsys, "batch", "--input", str(inp), "--output", str(out), "--mode", "ar")
    assert code == 0 and (tmp_path / "out.jsonl.manifest.json").exists()
    with open(out, "ab") as f:
        f.write(b'{"id": "torn')   # a torn tail, which a refused resume must not cut either
    before = out.read_bytes()
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(out), "--resume", "--mode", "spec")
    assert code == 2 and "mode 'ar' -> 'spec'" in err and len(err.strip().splitlines()) == 1
    assert out.read_bytes() == before
    inp.write_text(inp.read_text() + '{"id": "c", "prompt": ""}\n')
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(out), "--resume")
    assert code == 2 and "the input's content" in err and out.read_bytes() == before


def test_resume_refuses_a_file_that_is_not_a_batch_output_without_cutting_it(capsys, tmp_path):
    inp, out = errors_only_input(tmp_path), tmp_path / "notes.txt"
    out.write_bytes(b"my notes\nline two without newline")
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(out), "--resume")
    assert code == 2 and "not a record of triforce batch" in err
    assert out.read_bytes() == b"my notes\nline two without newline"


def test_retry_errors_reruns_error_records_and_keeps_each_id_once(tmp_path):
    out = tmp_path / "out.jsonl"
    manifest = manifest_for(tmp_path / "in", b"x", {"mode": "ar"})
    first = OutputFile(out, resume=False, manifest=manifest)
    first.append({"id": "ok", "status": "ok", "error": None, "text": "t", "token_ids": [1], "stats": {}, "line": 1})
    first.append(error_record("bad", 2, "invalid"))
    first.append(error_record("died", 3, "a replica died 2 times", retryable=True))
    first.close()
    resumed = OutputFile(out, resume=True, manifest=manifest)
    assert set(resumed.done) == {"ok", "bad"}   # a replica's death is retried by --resume alone
    resumed.close()
    retried = OutputFile(out, resume=True, manifest=manifest, retry_errors=True)
    assert set(retried.done) == {"ok"} and [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["ok"]
    retried.close()


def test_disk_full_is_one_line_and_leaves_the_output_resumable(tmp_path, monkeypatch):
    import errno
    from triforce.runtime.errors import UserError
    out = tmp_path / "out.jsonl"
    output = OutputFile(out, resume=False)
    output.append(error_record("a", 1, "x"))
    real_write = os.write

    def full(fd, data):
        real_write(fd, bytes(data[:5]))   # part of the line lands, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(UserError, match="disk full.*--resume"):
        output.append(error_record("b", 2, "y"))
    monkeypatch.undo()
    output.close()
    assert [json.loads(l)["id"] for l in out.read_text().splitlines()] == ["a"]


@pytest.mark.slow   # ~30 s: three replica processes start (torch import) and fail
def test_a_replica_that_cannot_load_fails_the_job_within_bounded_starts(capsys, tmp_path, default_model_dir):
    broken = tmp_path / "broken-model"
    shutil.copytree(default_model_dir, broken, ignore=shutil.ignore_patterns("model.safetensors", "drafter*"))
    with open(default_model_dir / "model.safetensors", "rb") as f:
        (broken / "model.safetensors").write_bytes(f.read(1 << 20))   # truncated: the first MB only
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n')
    start = time.monotonic()
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(tmp_path / "out.jsonl"),
                        "--model", str(broken), "--replicas", "2", "--threads", "1", "--max-start-failures", "3")
    assert code == 2 and time.monotonic() - start < 240
    last = err.strip().splitlines()[-1]
    assert last.startswith("triforce: error: a replica failed to start 3 times in a row; last:"), err
    assert err.count("failed to start (") == 2   # two restarts noted, then the third failure stops the job


@pytest.mark.slow
def test_the_driver_finishes_a_fuzzed_job_with_one_line_per_record(capsys, tmp_path):
    """The whole command on the adversarial input, one local replica decoding batches of 3: exit 0,
    exactly one output line per input record, each an ok record or an error naming its line."""
    lines = adversarial_lines(random.Random(2))
    inp = tmp_path / "in.jsonl"
    inp.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
    out = tmp_path / "out.jsonl"
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(out), "--max-new-tokens", "1",
                        "--batch-size", "3", "--threads", "1")
    assert code == 0, err
    records = [json.loads(l) for l in out.read_bytes().decode("utf-8").splitlines()]
    assert len(records) == len(lines) and len({r["id"] for r in records}) == len(lines)
    assert {r["line"] for r in records} == set(range(1, len(lines) + 1))
    assert all(r["status"] == "ok" or r["error"].startswith(f"line {r['line']}: ") for r in records)
    assert {r["id"] for r in records if r["status"] == "ok"} >= {"ok-1", "ok-2", "ok-3"}


def test_a_sticky_device_error_retires_the_replica(replica, monkeypatch):
    """A CUDA error that poisons the context must not turn every later record into an error:
    the replica gives up (the driver replaces it and runs the record again)."""
    from triforce.runtime.batch_replicas import ReplicaBroken

    def sticky(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    monkeypatch.setattr(replica.engine, "generate", sticky)
    with pytest.raises(ReplicaBroken, match="illegal memory access"):
        replica.run(pack({"jobs": [{"line": 1, "id": "a", "prompt": "Hello", "params": {}}]}))


def test_more_ray_replicas_than_the_cluster_can_place_are_refused_before_any_work(monkeypatch):
    ray = pytest.importorskip("ray")
    import triforce.actors.client
    from triforce.runtime.batch_replicas import RayPool
    from triforce.runtime.errors import UserError
    monkeypatch.setattr(triforce.actors.client, "connect_ray", lambda **kw: None)
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    with pytest.raises(UserError, match=r"--replicas 3 needs 3 CPUs but the Ray cluster has 2"):
        RayPool(3, {}, 1)


def test_an_output_in_a_directory_that_cannot_be_made_is_one_line(capsys, tmp_path):
    inp = errors_only_input(tmp_path)
    (tmp_path / "file").write_text("x")
    code, err = run_cli(capsys, "batch", "--input", str(inp), "--output", str(tmp_path / "file" / "out.jsonl"))
    assert code == 2 and "cannot write" in err and "Traceback" not in err


@pytest.mark.slow
def test_a_second_process_on_a_running_jobs_output_refuses_and_the_first_finishes_intact(tmp_path):
    import subprocess
    import sys
    repo = Path(__file__).resolve().parents[1]
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": f"r{i}", "prompt": f"Count to {i}:"}) + "\n" for i in range(4)))
    out = tmp_path / "out.jsonl"
    cmd = [sys.executable, "-m", "triforce.runtime.cli", "batch", "--input", str(inp), "--output", str(out),
           "--max-new-tokens", "24", "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(repo)}
    first = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and not (tmp_path / "out.jsonl.lock").exists():
            time.sleep(0.05)
        second = subprocess.run(cmd + ["--resume"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert first.poll() is None, "the first job ended before the second could try"
        assert second.returncode == 2 and "is in use by another job" in second.stderr, second.stderr
        assert f"pid {first.pid}" in second.stderr and len(second.stderr.strip().splitlines()) == 1
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            first.kill()
    records = [json.loads(l) for l in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["r0", "r1", "r2", "r3"] and all(r["status"] == "ok" for r in records)
