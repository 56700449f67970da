"""`triforce batch`: bad input becomes error records, the output is durable and exactly-once across
a SIGKILL and --resume, replicas that die give their records back, msgpack messages are bounded."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from triforce.runtime.batch import (MAX_MESSAGE_BYTES, OutputFile, Replica, error_record, pack, read_jobs, schedule,
                           unpack)
from triforce.runtime.cli import main
from triforce.runtime.config import RunConfig

REPO = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((l if isinstance(l, str) else json.dumps(l)) + "\n" for l in lines))
    return path


@pytest.fixture(scope="module")
def kjv_prompts():
    """Ten real KJV passages of about 200 tokens each."""
    from triforce.runtime.assets import kjv_books
    words = kjv_books(["Ruth"]).split()
    return [" ".join(words[i * 150:(i + 1) * 150]) for i in range(10)]


# --------------------------------------------------------------------------- input validation
def test_each_kind_of_bad_record_becomes_an_error_record_naming_its_line(tmp_path):
    (tmp_path / "ok.txt").write_text("In the beginning")
    path = write_jsonl(tmp_path / "in.jsonl", [
        {"id": "good", "prompt": "hello"},
        "{not json",
        ["a", "list"],
        {"prompt": "no id"},
        {"id": 7, "prompt": "numeric id"},
        {"id": "nofile", "prompt_file": "missing.txt"},
        {"id": "temp", "prompt": "x", "temperature": -1},
        {"id": "topp", "prompt": "x", "top_p": 1.5},
        {"id": "mnt", "prompt": "x", "max_new_tokens": "5"},
        {"id": "mode", "prompt": "x", "mode": "fast"},
        {"id": "two", "prompt": "x", "messages": [{"role": "user", "content": "y"}]},
        {"id": "none"},
        {"id": "empty", "prompt": "  "},
        {"id": "msgs", "messages": [{"role": "user"}]},
        {"id": "extra", "prompt": "x", "temprature": 1},
        {"id": "file", "prompt_file": "ok.txt", "seed": 3},
    ])
    path.write_bytes(path.read_bytes() + b"\n\n" + b'{"id": "latin1", "prompt": "caf\xe9"}\n')
    jobs, errors, total = read_jobs(path, RunConfig())
    assert total == 17 and [j["id"] for j in jobs] == ["good", "file"]
    assert jobs[1]["prompt_file"] == str(tmp_path / "ok.txt") and jobs[1]["params"] == {"seed": 3}
    by_id = {e["id"]: e["error"] for e in errors}
    expected = {"<line 2>": "line 2: malformed JSON", "<line 3>": "line 3: expected a JSON object",
                "<line 4>": 'line 4: record has no "id"', "<line 5>": "line 5: id 7 must be a non-empty string",
                "nofile": "line 6: prompt file 'missing.txt' does not exist", "temp": "line 7: temperature -1",
                "topp": "line 8: top_p 1.5", "mnt": "line 9: max_new_tokens '5' must be an int",
                "mode": "line 10: mode 'fast'", "two": "line 11: needs exactly one of",
                "none": "line 12: needs exactly one of", "empty": "line 13: prompt must be a non-empty string",
                "msgs": "line 14: messages must be", "extra": "line 15: unknown key(s) temprature",
                "<line 19>": "line 19: not UTF-8"}
    assert set(by_id) == set(expected)
    for job_id, needle in expected.items():
        assert by_id[job_id].startswith(needle), (job_id, by_id[job_id])
    assert all(e["status"] == "error" and e["token_ids"] == [] and e["text"] is None for e in errors)


def run_cli(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_duplicate_ids_are_refused_before_the_job_starts(capsys, tmp_path):
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "y"},
                                               {"id": "a", "prompt": "z", "temperature": -1}])
    code, err = run_cli(capsys, "batch", "--input", str(path), "--output", str(tmp_path / "out.jsonl"))
    assert code == 2 and "duplicate id" in err and "'a' on lines 1, 3" in err and "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("content", ["", "\n  \n\n"])
def test_empty_input_is_a_clear_message(capsys, tmp_path, content):
    path = tmp_path / "in.jsonl"
    path.write_text(content)
    code, err = run_cli(capsys, "batch", "--input", str(path), "--output", str(tmp_path / "out.jsonl"))
    assert code == 2 and "has no records" in err


def test_missing_input_and_existing_output_without_resume(capsys, tmp_path):
    code, err = run_cli(capsys, "batch", "--input", str(tmp_path / "nope.jsonl"), "--output", str(tmp_path / "o"))
    assert code == 2 and "does not exist" in err
    path = write_jsonl(tmp_path / "in.jsonl", [{"id": "a", "prompt": "x"}])
    (tmp_path / "out.jsonl").write_text('{"id": "a"}\n')
    code, err = run_cli(capsys, "batch", "--input", str(path), "--output", str(tmp_path / "out.jsonl"))
    assert code == 2 and "--resume" in err


# ------------------------------------------------------------------------------ output, wire
def test_resume_cuts_a_torn_last_line_and_knows_the_done_ids(tmp_path):
    path = tmp_path / "out.jsonl"
    out = OutputFile(path, resume=False)
    out.append(error_record("a", 1, "x"))
    out.append(error_record("b", 2, "y"))
    out.close()
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"id": "c", "status": "o')   # killed mid-write
    out = OutputFile(path, resume=True)
    assert set(out.done) == {"a", "b"} and path.read_bytes() == whole
    out.append(error_record("c", 3, "z"))
    out.close()
    assert [json.loads(l)["id"] for l in path.read_text().splitlines()] == ["a", "b", "c"]


def test_msgpack_messages_are_bounded_and_maps_only():
    assert unpack(pack({"jobs": [{"id": "a", "prompt": "é"}]})) == {"jobs": [{"id": "a", "prompt": "é"}]}
    with pytest.raises(ValueError, match="exceeds"):
        pack({"prompt": "x" * (MAX_MESSAGE_BYTES + 1)})
    with pytest.raises(ValueError, match="exceeds"):
        unpack(b"\x00" * (MAX_MESSAGE_BYTES + 1))
    with pytest.raises(ValueError, match="msgpack map"):
        unpack(b"\x92\x01\x02")   # a msgpack array, not a map


class FakePool:
    """A pool whose replica 0 dies on its first call; the job must come back and finish once."""

    def __init__(self, die_on: set):
        self.slots, self.die_on, self.calls, self.restarts, self.events = [None, None], die_on, [], 0, []

    def submit(self, slot, message):
        jobs = unpack(message)["jobs"]
        self.calls.append((slot, [j["id"] for j in jobs]))
        if any(j["id"] in self.die_on for j in jobs):
            self.events.append(("died", slot, "killed"))
        else:
            results = [{"id": j["id"], "status": "ok", "token_ids": [1]} for j in jobs]
            self.events.append(("result", slot, pack({"results": results})))

    def wait(self, timeout):
        events, self.events = self.events, []
        return events

    def restart(self, slot):
        self.restarts += 1
        self.events.append(("ready", slot, None))
        self.die_on = self.die_on - {"once"}   # "once" kills one replica only; "always" kills every one


def test_a_dead_replica_puts_its_records_back(monkeypatch):
    import triforce.runtime.batch as batch
    monkeypatch.setattr(batch, "LocalPool", FakePool)   # start like a local pool: wait for "ready"
    pool = FakePool({"once", "always"})
    pool.events = [("ready", 0, None), ("ready", 1, None)]
    jobs = [{"id": i, "line": n, "prompt": "x", "params": {}} for n, i in enumerate(["once", "b", "always", "d"], 1)]
    records = []
    schedule(jobs, pool, 1, records.append)
    assert sorted(r["id"] for r in records) == ["always", "b", "d", "once"]   # each exactly once
    status = {r["id"]: r["status"] for r in records}
    assert status == {"once": "ok", "b": "ok", "d": "ok", "always": "error"}
    assert "replica died 2 times" in next(r["error"] for r in records if r["id"] == "always")
    assert pool.restarts == 3


# ------------------------------------------------------------------------- real model, replica
@pytest.fixture(scope="module")
def replica(default_model_dir, one_thread):
    return Replica({"model": str(default_model_dir), "max_new_tokens": 6})


def test_replica_runs_prompt_file_and_messages_and_refuses_a_too_long_prompt(replica, tmp_path, kjv_prompts):
    (tmp_path / "p.txt").write_text(kjv_prompts[0])
    (tmp_path / "long.txt").write_text("and it came to pass " * 2500)   # ~12.5K tokens > 8,192 positions
    jobs = [{"line": 1, "id": "a", "prompt": kjv_prompts[0], "params": {}},
            {"line": 2, "id": "b", "prompt_file": str(tmp_path / "p.txt"), "params": {}},
            {"line": 3, "id": "c", "messages": [{"role": "user", "content": "Who was Ruth?"}], "params": {}},
            {"line": 4, "id": "d", "prompt_file": str(tmp_path / "long.txt"), "params": {}},
            {"line": 5, "id": "e", "prompt_file": str(tmp_path / "gone.txt"), "params": {}}]
    a, b, c, d, e = unpack(replica.run(pack({"jobs": jobs})))["results"]
    direct = replica.engine.generate(replica.engine.encode(kjv_prompts[0]), RunConfig(max_new_tokens=6))
    assert a["status"] == b["status"] == c["status"] == "ok"
    assert a["token_ids"] == b["token_ids"] == direct.token_ids and a["text"] == direct.text
    assert a["stats"]["prompt_tokens"] == len(replica.engine.encode(kjv_prompts[0])) and a["stats"]["mode"] == "ar"
    assert c["text"].strip()
    assert d["status"] == "error" and d["error"].startswith("line 4: prompt of") and "8192" in d["error"]
    assert e["status"] == "error" and "gone.txt" in e["error"] and "does not exist" in e["error"]


def test_prefix_cache_prefills_a_shared_document_once_and_answers_the_same(default_model_dir, one_thread, kjv_prompts):
    """--prefix-cache: questions over one document (records whose prompts share their start) copy
    the document's prefill from the replica's last request, in whole passes; every record's tokens
    are a plain replica's, and its stats say how many positions were copied."""
    doc = " ".join(kjv_prompts[:2])                                      # about 400 tokens
    jobs = [{"line": i + 1, "id": str(i), "prompt": f"{doc}\n\nQuestion: {q}", "params": {}}
            for i, q in enumerate(["Who was Ruth?", "Where did Naomi go?", "What did Boaz do?"])]
    settings = {"model": str(default_model_dir), "max_new_tokens": 6, "prefill_chunk": 64}
    plain, cached = Replica(settings), Replica({**settings, "prefix_cache": True})
    want = [unpack(plain.run(pack({"jobs": [job]})))["results"][0] for job in jobs]   # one job a call, as --batch-size 1
    got = [unpack(cached.run(pack({"jobs": [job]})))["results"][0] for job in jobs]
    assert [r["token_ids"] for r in got] == [r["token_ids"] for r in want]
    contexts = [cached.engine.encode(job["prompt"])[:-1] for job in jobs]   # what a prefill holds
    shared = [next(i for i, (a, b) in enumerate(zip(x, y)) if a != b) for x, y in zip(contexts, contexts[1:])]
    assert min(shared) >= len(cached.engine.encode(doc)) - 1
    assert [r["stats"]["prefill_reused"] for r in want] == [0, 0, 0]
    assert [r["stats"]["prefill_reused"] for r in got] == [0, *(n // 64 * 64 for n in shared)]


# ------------------------------------------------------------------- end to end: kill, resume
def batch_cmd(inp: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "triforce.runtime.cli", "batch", "--input", str(inp), "--output", str(out),
            "--max-new-tokens", "8", "--threads", "1", *extra]


def records_by_id(path: Path) -> dict:
    lines = path.read_text().splitlines()
    records = [json.loads(l) for l in lines]
    ids = [r["id"] for r in records]
    assert len(ids) == len(set(ids)), "an id appears twice"
    return {r["id"]: r for r in records}


@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_output(tmp_path, kjv_prompts):
    """The uninterrupted run decodes in batches of 3 on 2 replicas, the killed and resumed one
    record by record on one: greedy and seeded records must agree token for token."""
    (tmp_path / "long.txt").write_text("and it came to pass " * 2500)
    (tmp_path / "p.txt").write_text(kjv_prompts[9])
    lines = [{"id": f"ruth-{i}", "prompt": p} for i, p in enumerate(kjv_prompts[:8])]
    lines[3] = {**lines[3], "mode": "spec", "temperature": 0.8, "seed": 5}     # seeded, speculative
    lines += ["{\"id\": \"broken\", ", {"id": "nofile", "prompt_file": "missing.txt"},
              {"id": "toolong", "prompt_file": "long.txt"}, {"id": "badp", "prompt": "x", "top_p": 2},
              {"id": "file", "prompt_file": "p.txt"}]
    inp = write_jsonl(tmp_path / "in.jsonl", lines)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    ref = tmp_path / "ref.jsonl"
    done = subprocess.run(batch_cmd(inp, ref, "--replicas", "2", "--batch-size", "3"), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "13/13 records" in done.stderr and "acceptance" in done.stderr
    expected = records_by_id(ref)
    assert len(expected) == 13 and sum(r["status"] == "ok" for r in expected.values()) == 9
    report = json.loads((tmp_path / "ref.report" / "summary.json").read_text())
    assert report["records"] == 13 and report["ok"] == 9 and (tmp_path / "ref.report" / "acceptance.png").exists()

    out = tmp_path / "out.jsonl"
    proc = subprocess.Popen(batch_cmd(inp, out), cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if out.exists() and out.read_text().count('"status": "ok"') >= 2:   # partway through the real records
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be killed"
    replicas = psutil.Process(proc.pid).children()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    gone, alive = psutil.wait_procs(replicas, timeout=10)
    assert replicas and not alive, "a replica outlived its killed driver"
    partial = records_by_id(out)
    assert 4 <= len(partial) < 13
    with open(out, "ab") as f:
        f.write(b'{"id": "ruth-7", "status": "ok", "te')   # as if killed in the middle of a write

    resumed = subprocess.run(batch_cmd(inp, out, "--resume", "--retry-errors"), cwd=REPO, env=env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stderr
    got = records_by_id(out)   # every id exactly once, although error records were run again
    assert set(got) == set(expected)
    for job_id, record in expected.items():
        for key in ("status", "error", "text", "token_ids", "line"):
            assert got[job_id][key] == record[key], (job_id, key)
    for job_id, needle in [("<line 9>", "malformed JSON"), ("nofile", "missing.txt"), ("toolong", "8192"),
                           ("badp", "top_p 2")]:
        assert needle in got[job_id]["error"], job_id


@pytest.mark.slow
def test_ray_backend_runs_the_same_records(tmp_path, kjv_prompts, replica):
    pytest.importorskip("ray")
    inp = write_jsonl(tmp_path / "in.jsonl", [{"id": f"r{i}", "prompt": p} for i, p in enumerate(kjv_prompts[:2])])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)   # a private local Ray, not whatever cluster the environment points at
    out = tmp_path / "ray.jsonl"
    done = subprocess.run(batch_cmd(inp, out, "--backend", "ray", "--replicas", "2"), cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = {i: r["token_ids"] for i, r in records_by_id(out).items()}
    engine = replica.engine
    assert got == {f"r{i}": engine.generate(engine.encode(p), RunConfig(max_new_tokens=8)).token_ids
                   for i, p in enumerate(kjv_prompts[:2])}
