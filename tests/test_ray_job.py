"""`ray job submit` to a head started here, bound to loopback only (the dashboard and its job
server never listen beyond 127.0.0.1): `triforce generate --backend ray --pp 2` runs as a job and
its output equals the in-process path's."""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "The capital of France is Paris. The capital of Italy is"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ray_cli() -> str:
    found = Path(sys.executable).with_name("ray")
    return str(found) if found.exists() else shutil.which("ray")


@pytest.fixture
def head():
    """A one-node cluster; terminating `ray start --block` stops exactly the processes it started
    (never `ray stop`, which would stop every Ray cluster of this user on the machine)."""
    pytest.importorskip("ray")
    gcs, dashboard, agent = free_port(), free_port(), free_port()
    token = secrets.token_hex(32)   # Ray's token authentication: this cluster's own secret
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    temp = tempfile.mkdtemp(prefix="tfray", dir="/tmp")   # short: Ray's socket paths must fit 107 bytes
    proc = subprocess.Popen(
        [ray_cli(), "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dashboard), "--num-cpus", "4",
         # the job agent's HTTP port (default 52365) taken by another cluster on this machine would
         # leave the job server with "No available agent to submit job" (seen beside test_ray.py's)
         "--dashboard-agent-listen-port", str(agent),
         "--temp-dir", temp],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    address = f"http://127.0.0.1:{dashboard}"
    deadline = time.monotonic() + 90
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while True:
        try:
            direct.open(f"{address}/api/version", timeout=2)
            break
        except urllib.error.HTTPError:   # answering (401 without the token): the job server is up
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"ray head did not start: {proc.stdout.read().decode()[-2000:]}")
            time.sleep(1)
    yield address, env
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow   # ~75 s on a shared 2-core machine: head start, job upload, two shard workers
def test_ray_job_submit_generates_what_the_local_path_does(head, tmp_path):
    address, env = head
    out = tmp_path / "result.json"
    # without the token the job server refuses the submission
    refused = subprocess.run([ray_cli(), "job", "list", "--address", address], capture_output=True, text=True,
                             timeout=60, env={**env, "RAY_AUTH_TOKEN": "0" * 64})
    assert refused.returncode != 0 and "uthenticat" in refused.stderr
    job = subprocess.run(
        [ray_cli(), "job", "submit", "--address", address, "--working-dir", str(ROOT), "--",
         sys.executable, "-m", "triforce.runtime.cli", "generate", "--backend", "ray", "--pp", "2", "--device", "cpu",
         "--prompt", PROMPT, "--max-new-tokens", "8", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["stats"]["ray"]["pp"] == 2
    engine = Engine(RunConfig(device="cpu"))
    expected = engine.generate(engine.encode(PROMPT), RunConfig(max_new_tokens=8)).token_ids
    assert result["token_ids"] == expected
    assert result["text"].strip() in job.stdout    # the job's stdout (the streamed text) reached us
