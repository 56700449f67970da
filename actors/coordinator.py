"""The coordinator: owns the request state (committed tokens, the sampler's generator), runs the
drafter in its own process, and drives the target's levels on the shard actors through the same
Engine / SpecDecoder / Level code as the in-process path. Only the target-weight levels' model and
caches differ: proxies (actors/group.py) that make one remote call per forward pass.

Faults: a step that meets a ShardFailure is undone (the generator's state restored, per-level
stats restored; committed tokens are only appended after a step's passes succeed), the shard group
is restarted, the target-weight caches are refilled from the committed tokens (prefill again),
and the step is retried, at most ray_retries times; then the request fails with a clear error.
No token is duplicated or lost: `seq` changes only when a step completes.
"""
from __future__ import annotations

import copy
import queue
import threading
from dataclasses import dataclass
from typing import Callable

import torch

from triforce.actors.group import GroupSpec, RemoteCache, RemoteModel, ShardFailure, ShardGroup
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import DRAFTER_MODES, Engine
from triforce.runtime.errors import UserError
from triforce.runtime.graphs import level_forward
from triforce.runtime.model import TORCH_DTYPES
from triforce.runtime.modes import LevelSpec, make_cache, mode_levels
from triforce.runtime.placement import Placement
from triforce.runtime.probes import resolve_device
from triforce.runtime.speculate import Level, SpecDecoder


class ShardsLost(UserError):
    """The shards kept failing: the request is abandoned after ray_retries restarts."""


@dataclass
class ResilientDecoder(SpecDecoder):
    recover: Callable[["ResilientDecoder"], None] | None = None  # restart the shards, refill from seq
    retries: int = 2                                              # restarts allowed per step

    def step(self, budget: int) -> list[int]:
        rng = self.generator.get_state()
        for attempt in range(self.retries + 1):
            stats = [copy.copy(level.stats) for level in self.stack]
            try:
                return super().step(budget)
            except ShardFailure as failure:
                self.generator.set_state(rng)   # the retried step draws the same random numbers
                for level, saved in zip(self.stack, stats):
                    level.stats = saved
                if attempt == self.retries:
                    raise ShardsLost(f"a shard actor failed and {self.retries} restart(s) did not help "
                                     f"({failure}); {len(self.seq)} committed tokens were kept. Check the "
                                     "actors' logs (ray logs) or raise ray_retries") from failure
                try:
                    self.recover(self)
                except ShardFailure:
                    continue   # counts as this attempt; the next one restarts again


class RayEngine(Engine):
    """An Engine whose target weights live in a ShardGroup. Runs inside the coordinator actor."""

    def __init__(self, run: RunConfig, cpus: float, gpus: int):
        self.open_checkpoint(run)
        self.device = resolve_device("auto" if run.device != "cpu" else "cpu")   # for the drafter
        self.placement = Placement.from_flags(self.cfg.num_layers, "cuda" if gpus else "cpu", run.on_chip_layers,
                                              False, tp=run.tp, pp=run.pp)
        self.group = ShardGroup(GroupSpec(str(self.model_dir), run.dtype, run.device, run.rope_scaling,
                                          self.placement, cpus))
        self.model = RemoteModel(self.group, self.cfg, self.device, TORCH_DTYPES[run.dtype])
        self.retries = run.ray_retries
        self.drafter = self.load_drafter(run) if run.mode in DRAFTER_MODES else None
        self.pass_costs = {}   # as Engine's: --gamma auto's costs by request shape

    def build_stack(self, run: RunConfig, capacity: int) -> tuple[list[Level], list[int]]:
        """The mode's levels (runtime/modes.py) with the target-weight caches in the shards: each
        remote cache is described to them by its spec (sent in the next call); the drafter's cache
        is local to the coordinator, which runs the drafter."""
        specs, gammas = mode_levels(run, capacity)
        remote = {}   # name -> CacheSpec as a dict, for the shards

        def level(spec: LevelSpec) -> Level:
            if spec.model == "drafter":
                d = self.drafter
                cache = make_cache(spec.cache, d.cfg, d.rope(spec.cache.positions), self.device, d.dtype)
                built = Level(spec.name, d, cache, run.sampling, spec.max_pass, role=spec.model)
                built.forward = level_forward(d, cache, run.cuda_graphs, "drafter")   # as the local engine's
                return built
            remote[spec.name] = spec.cache.to_dict()
            cache = RemoteCache(self.group, spec.name, spec.cache.kind)
            return Level(spec.name, self.model, cache, run.sampling, spec.max_pass, role=spec.model)

        stack = [level(spec) for spec in specs]
        self.group.record(["new", remote])
        return stack, gammas

    def prefill(self, stack, prompt, on_prefill) -> int:
        for attempt in range(self.retries + 1):
            try:
                reused = super().prefill(stack, prompt, on_prefill)
                self.group.mark_prefill_done()
                return reused
            except ShardFailure as failure:
                if attempt == self.retries:
                    raise ShardsLost(f"a shard actor failed during prefill and {self.retries} restart(s) did not "
                                     f"help ({failure})") from failure
                self._restart(stack)

    def _restart(self, stack: list[Level]) -> list[Level]:
        """Fresh shards (caches allocated, empty); returns the levels whose caches live there."""
        self.group.restart()
        remote = [level for level in stack if level.model is self.model]   # on the shards' weights
        for level in remote:
            level.cached, level.safe = [], 0
        return remote

    def recover(self, decoder: ResilientDecoder) -> None:
        """Restarts the shards and refills their caches with the committed tokens."""
        remote = self._restart(decoder.stack)
        stats = [level.stats for level in remote]
        super().prefill(remote, decoder.seq, None)     # the target last, as prefill expects
        for level, saved in zip(remote, stats):
            level.stats = saved

    def decoder(self, stack, gammas, seq, generator, on_round) -> ResilientDecoder:
        return ResilientDecoder(stack, gammas, seq, generator, on_round=on_round, recover=self.recover,
                                retries=self.retries)

    def generate(self, prompt_ids, run, on_tokens=None, on_prefill=None):
        self.retries = run.ray_retries
        if self.group.broken:   # a previous request gave up on its shards: start afresh
            self.group.restart()
        self.group.reset_stats()
        result = super().generate(prompt_ids, run, on_tokens, on_prefill)
        result.stats["ray"] = self.group.stats(len(result.token_ids))
        result.stats["ray"]["host_bytes"] = {node[:12]: usage["total_bytes"]
                                             for node, usage in self.group.host_bytes().items()}
        return result


class Coordinator:
    """Thin Ray shell over RayEngine (decorated with ray.remote by actors/client.py).
    generate() is a Ray generator: it streams ("prefill", n), ("tokens", ids) and finally
    ("result", dict) or ("error", message) as the request advances."""

    def __init__(self, run: RunConfig, cpus: float, gpus: int, threads: int):
        torch.set_num_threads(threads)
        self.error = None
        try:
            self.engine = RayEngine(run, cpus, gpus)
        except (UserError, ShardFailure) as e:   # surfaced by the first generate (an actor constructor cannot return it)
            self.engine, self.error = None, str(e)

    def generate(self, prompt_ids: list[int], run: RunConfig):
        if self.error:
            yield ("error", self.error)
            return
        events: queue.Queue = queue.Queue()

        def work():
            try:
                result = self.engine.generate(prompt_ids, run, on_tokens=lambda ids: events.put(("tokens", ids)),
                                              on_prefill=lambda n: events.put(("prefill", n)))
                events.put(("result", result.to_json()))
            except UserError as e:
                events.put(("error", str(e)))
            except BaseException as e:  # surfaced to the driver with its type, not swallowed
                events.put(("exception", e))

        threading.Thread(target=work, daemon=True).start()
        while True:
            event = events.get()
            if event[0] == "exception":
                raise event[1]
            yield event
            if event[0] in ("result", "error"):
                return

    def shards(self) -> list:
        """The shard actors' handles, stage by stage (for fault-injection tests and operators)."""
        return self.engine.group.stages

    def shutdown(self) -> None:
        if self.engine is not None:
            self.engine.group.shutdown()
