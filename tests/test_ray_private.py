"""The private Ray cluster that `generate`/`batch --backend ray` start (no address given): token
authentication on, every port on loopback, and no port does anything for a client without the
token. Run in a subprocess: the cluster, its token and Ray's settings must not leak into other
tests."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = r"""
import json, os, subprocess, sys, urllib.error, urllib.request
import psutil
from triforce.actors.client import connect_ray
connect_ray(num_cpus=1)
import ray
gcs = ray.get_runtime_context().gcs_address
listening = set()
for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
    try:
        listening |= {(proc.name(), c.laddr.ip, c.laddr.port) for c in proc.net_connections(kind="inet")
                      if c.status == "LISTEN"}
    except psutil.Error:
        pass
# a client that keeps the loopback address (Ray would otherwise rewrite it to the routable one,
# where nothing listens), with no token and with a wrong one
clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
clean["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
tries = {}
for name, env in (("no token", clean), ("wrong token", {**clean, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64})):
    code = f"import ray; ray.init(address={gcs!r}); print('CONNECTED', ray.cluster_resources())"
    try:
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=90)
        tries[name] = "connected" if "CONNECTED" in out.stdout else (
            "refused: authentication" if "uthenticat" in out.stderr else f"failed {out.returncode}")
    except subprocess.TimeoutExpired:
        tries[name] = "no answer"
http = {}
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for _, ip, port in listening:
    for path in ("/api/version", "/api/jobs/", "/"):
        try:
            with opener.open(f"http://127.0.0.1:{port}{path}", timeout=3) as resp:
                body = resp.read(4096).decode("utf-8", "replace")
                http[f"{port}{path}"] = "metrics" if body.startswith("# HELP") else f"open {resp.status}"
        except urllib.error.HTTPError as e:
            http[f"{port}{path}"] = f"refused {e.code}"
        except Exception as e:   # not HTTP (gRPC), or reset
            http[f"{port}{path}"] = f"not http ({type(e).__name__})"
print(json.dumps({"gcs": gcs, "mode": os.environ.get("RAY_AUTH_MODE"), "listening": sorted(listening),
                  "tries": tries, "http": http}))
ray.shutdown()
"""


@pytest.mark.slow   # ~60 s on a shared 2-core machine: a cluster and two client processes
def test_the_private_cluster_needs_the_token_and_listens_on_loopback_only():
    pytest.importorskip("ray")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(Path.home())}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["mode"] == "token" and report["gcs"].startswith("127.0.0.1:")
    assert report["tries"] == {"no token": "refused: authentication", "wrong token": "refused: authentication"}, \
        report["tries"]
    assert report["listening"], "found no listening ports to check"
    for name, ip, port in report["listening"]:
        assert ip in ("127.0.0.1", "::ffff:127.0.0.1", "::1"), (name, ip, port)
    # Over HTTP, nothing answers without the token except Prometheus' read-only metrics text
    # (loopback only; Ray has no token check there): no job, actor or state API is open.
    opened = {k: v for k, v in report["http"].items() if v.startswith("open")}
    assert not opened, opened
