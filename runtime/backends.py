"""The one place the backend is chosen: an in-process Engine, or a client of a coordinator actor
on Ray (actors/client.py) with the same encode / check_length / generate. An application-level
module (rule 11): it is the only runtime/ code that knows both backends."""
from __future__ import annotations

from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine


def open_engine(run: RunConfig, keep_prefill: bool = False, context: int | None = None):
    """context: prompt + new tokens an `offload: auto` placement is planned for (runtime.engine.Engine)."""
    if run.backend == "ray":
        from triforce.actors.client import RayClient   # lazy: imports ray only for the Ray backend
        return RayClient(run)
    return Engine(run, keep_prefill=keep_prefill, context=context)
