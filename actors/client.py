"""The driver's side of `--backend ray`: joins (or starts) a Ray cluster, starts the coordinator
actor, and offers the Engine's interface (encode / check_length / generate) so that the CLI and
anything else calling runtime.backends.open_engine need not know where the model runs.

Ray workers must import this project. In a `ray job submit --working-dir .` job, Ray ships the
directory and puts it on the workers' path; otherwise (a local cluster, `ray start` by hand with
the project installed or checked out at the same path) the driver passes the checkout's root in
PYTHONPATH, so workers import the same code as the driver, installed or not.
"""
from __future__ import annotations

import atexit
import os
from pathlib import Path

from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Checkpoint, Result
from triforce.runtime.errors import UserError
from triforce.runtime.parallel import check_tp, stage_layers

ROOT = Path(__file__).resolve().parents[1]   # the checkout holding runtime/ and actors/


def worker_env() -> dict:
    """runtime_env for ray.init: the checkout on the workers' PYTHONPATH, unless Ray already ships
    it (a submitted job's working_dir)."""
    if os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR"):   # set by Ray for a `ray job submit` entrypoint
        return {}
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path}}


def connect(run: RunConfig) -> None:
    """Joins run.ray_address (or $RAY_ADDRESS); without either starts a private local cluster
    sized for the run (logical CPUs: the shards and the coordinator each reserve ray_cpus)."""
    cpus = max(os.cpu_count() or 1, int(-(-(run.tp * run.pp + 1) * run.ray_cpus // 1)))
    connect_ray(num_cpus=cpus, address=run.ray_address)


def connect_ray(num_cpus: int, address: str | None = None) -> None:
    """Joins `address` (or $RAY_ADDRESS: a cluster, or the one of `ray job submit`); without
    either starts a private cluster for this process: token authentication on (a fresh random
    token, held in this process's environment and inherited by Ray's processes only) and the node
    on loopback, so nothing on the network can reach it."""
    import ray
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS")
    kwargs = dict(runtime_env=worker_env() or None, logging_level="WARNING", log_to_driver=True)
    if address is not None:
        ray.init(address=address, **kwargs)
        return
    enable_private_token()
    loopback_node()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, **kwargs)


def loopback_node() -> None:
    """The private cluster's node on 127.0.0.1: Ray then binds its servers (GCS, raylet, agents,
    workers, metrics) to loopback and advertises loopback addresses (tests/test_ray_private.py
    lists them). Ray (2.60) has no public knob for this: its node address comes from
    services.get_node_ip_address, which answers loopback when multi-node clusters are off
    (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read once at import, hence the constant too)."""
    import ray._private.ray_constants as constants
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    constants.ENABLE_RAY_CLUSTER = False


def enable_private_token() -> None:
    """RAY_AUTH_MODE=token with a fresh token for a private cluster (never ~/.ray/auth_token:
    the token lives and dies with this process). An explicit RAY_AUTH_TOKEN is kept."""
    import secrets

    import ray
    major, minor = (int(p) for p in ray.__version__.split(".")[:2])
    if (major, minor) < (2, 52):
        raise UserError(f"Ray {ray.__version__} has no token authentication, which a private cluster needs; "
                        "install Ray 2.52 or newer: pip install 'ray[default]>=2.52'")
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    from ray._private.authentication import authentication_token_setup as setup   # Ray >= 2.52
    setup._enable_token_auth()   # refreshes Ray's cached config: this process sees token mode too


def shard_gpus(run: RunConfig) -> int:
    """1 GPU per shard when the run wants CUDA (auto: when the cluster has GPUs), else 0."""
    import ray
    if run.device == "cpu":
        return 0
    if run.device.startswith("cuda"):
        return 1
    return 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0


class RayClient(Checkpoint):
    """Engine's interface over a coordinator actor (the target is never loaded in this process)."""

    def __init__(self, run: RunConfig):
        import ray
        from triforce.actors.coordinator import Coordinator
        self.open_checkpoint(run)
        check_tp(self.cfg, run.tp)                 # refused here, before any cluster is touched
        stage_layers(self.cfg.num_layers, run.pp)
        connect(run)
        gpus = shard_gpus(run)
        self.device = f"ray tp={run.tp} pp={run.pp} {'cuda' if gpus else 'cpu'}"
        threads = max(1, int(run.ray_cpus))
        # The coordinator runs the drafter: on GPU clusters it shares a GPU with a shard.
        self.coordinator = ray.remote(Coordinator).options(
            num_cpus=run.ray_cpus, num_gpus=0.1 if gpus else 0, max_restarts=0,
        ).remote(run, run.ray_cpus, gpus, threads)
        self.closed = False
        atexit.register(self.close)   # shards and host arenas are released even if the caller forgets

    def generate(self, prompt_ids, run, on_tokens=None, on_prefill=None) -> Result:
        import ray
        for ref in self.coordinator.generate.remote(list(prompt_ids), run):
            kind, value = ray.get(ref)   # host sync: one event per decode step
            if kind == "tokens" and on_tokens:
                on_tokens(value)
            elif kind == "prefill" and on_prefill:
                on_prefill(value)
            elif kind == "error":
                raise UserError(value)
            elif kind == "result":
                return Result(**value)
        raise RuntimeError("the coordinator ended the request without a result")

    def shards(self) -> list[list]:
        import ray
        return ray.get(self.coordinator.shards.remote())   # host sync: a control query

    def close(self) -> None:
        import ray
        if self.closed or not ray.is_initialized():
            return
        self.closed = True
        try:
            ray.get(self.coordinator.shutdown.remote())   # host sync: the shards and arenas are gone
        except ray.exceptions.RayError:   # the coordinator is already gone: nothing left to release
            pass
        finally:
            ray.kill(self.coordinator)
