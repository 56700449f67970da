"""The coordinator's handle on the shard actors, and the proxies that let the unchanged Level loop
(runtime/speculate.py) drive them.

A Level calls `cache.crop(keep)` and then `model(tokens [1, T], cache, last_only)`. Here the model
is a RemoteModel that makes ONE remote call per forward pass to each shard (stages chained by
object references: hidden states go stage to stage without passing through the coordinator), and
the cache is a RemoteCache that only records crop / commit / fill_from; the records travel in
that next call's control message.

Failures: a call that raises (dead actor, error in a shard) or does not finish within
call_timeout_s raises ShardFailure; the coordinator then restarts the group (restart()) and refills
the caches from its committed tokens (actors/coordinator.py). A restart kills every shard of the
group, because the survivors of a torch.distributed group cannot take in a new member.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import msgpack
import torch

from triforce.actors.placement import create_placement_group, shard_gpus
from triforce.runtime.placement import Placement


class ShardFailure(RuntimeError):
    """A shard died, failed or stalled during a call; the group must be restarted."""


@dataclass(frozen=True)
class GroupSpec:
    model_dir: str              # target checkpoint directory (on every node)
    dtype: str                  # fp32 | bf16 | fp16
    device: str                 # the shards' device: auto | cpu | cuda
    rope_scaling: str | None    # TYPE:FACTOR or None
    placement: Placement        # tp, pp and the shards' device (runtime/placement.py)
    cpus_per_shard: float = 1.0  # CPUs reserved per shard actor (its torch threads: max(1, int(this)))
    call_timeout_s: float = 600.0   # a pass that takes longer counts as a failure (never a hang)


class ShardGroup:
    def __init__(self, spec: GroupSpec):
        self.spec = spec
        self.stages: list[list] = []       # stages[s][r]: actor of stage s, TP rank r
        self.pending: list[list] = []      # control ops waiting for the next call
        self.request: list | None = None   # the request's "new" op, re-sent after a restart
        self.calls = 0                     # remote calls (one per shard per forward pass)
        self.passes = 0                    # forward passes
        self.call_s = 0.0                  # wall time the coordinator waited on passes
        self.restarts = 0
        self.prefill = (0, 0, 0.0)         # (calls, passes, call_s) when prefill ended
        self.broken = False                # a call failed since the last (re)start
        self.pg = create_placement_group(spec.placement, spec.cpus_per_shard)
        self.memory, self.weights = self.host_tiers()
        self.start()

    # --- lifecycle ---
    def host_tiers(self) -> tuple[dict, list[dict | None]]:
        """The memory actor of every node the group's bundles landed on, and per bundle the
        manifest of the weights in its node's host tier (read from disk once per node)."""
        import ray
        from ray.util.placement_group import placement_group_table
        from triforce.actors.memory import memory_actor
        nodes = placement_group_table(self.pg)["bundles_to_node_id"]     # bundle index -> node id
        memory = {node: memory_actor(node) for node in set(nodes.values())}
        manifests = dict(zip(memory, self.wait([a.publish_checkpoint.remote(self.spec.model_dir, self.spec.dtype)
                                                for a in memory.values()], timeout_s=600.0)))
        return memory, [manifests[nodes[i]] for i in range(self.spec.placement.devices)]

    def host_bytes(self) -> dict:
        """Host-tier bytes per node (memory actors' accounting)."""
        return dict(zip(self.memory, self.wait([a.usage.remote() for a in self.memory.values()])))

    def start(self) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        from triforce.actors.shard import ShardActor
        p, spec = self.spec.placement, self.spec
        actor = ray.remote(ShardActor)
        self.stages = [[actor.options(
            num_cpus=spec.cpus_per_shard, num_gpus=shard_gpus(p), max_restarts=0,
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=s * p.tp + r),
        ).remote(max(1, int(spec.cpus_per_shard)), model_dir=spec.model_dir, dtype=spec.dtype, device=spec.device,
                 rope_scaling=spec.rope_scaling, tp=p.tp, pp=p.pp, stage=s, tp_rank=r,
                 weights=self.weights[s * p.tp + r])
            for r in range(p.tp)] for s in range(p.pp)]
        shards = self.shards
        self.wait([a.ready.remote() for a in shards], timeout_s=max(300.0, spec.call_timeout_s))  # weights loaded
        if p.tp > 1:
            address, port = self.wait([shards[0].rendezvous.remote()])[0]
            groups = [[s * p.tp + r for r in range(p.tp)] for s in range(p.pp)]
            self.wait([a.connect.remote(address, port, i, len(shards), groups, spec.call_timeout_s)
                       for i, a in enumerate(shards)])
        self.pending = [self.request] if self.request else []
        self.broken = False

    def restart(self) -> None:
        self.stop_actors()
        self.restarts += 1
        self.start()

    def stop_actors(self) -> None:
        import ray
        for a in self.shards:
            ray.kill(a, no_restart=True)
        self.stages = []

    def shutdown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group
        self.stop_actors()
        remove_placement_group(self.pg)
        self.wait([a.close.remote() for a in self.memory.values()])   # unlink the arenas
        for actor in self.memory.values():
            ray.kill(actor)

    @property
    def shards(self) -> list:
        return [a for stage in self.stages for a in stage]

    # --- calls ---
    def record(self, op: list) -> None:
        if op[0] == "new":
            self.request, self.pending = op, []   # a new request makes older records moot
        self.pending.append(op)

    def forward(self, name: str, tokens: list[int], last_only: bool) -> torch.Tensor:
        """One forward pass of cache `name` over `tokens`: logits [1, T|1, V] (float32, CPU)."""
        import ray
        control = msgpack.packb(self.pending + [["forward", name, tokens, last_only]])
        self.pending = []
        start, refs, hidden = time.perf_counter(), [], None
        for stage in self.stages:
            out = [a.run.remote(control, hidden) for a in stage]
            refs += out
            hidden = out[0]          # TP rank 0's output feeds every shard of the next stage
        self.wait(refs)
        logits = ray.get(hidden)     # host sync: the Level loop bookkeeps tokens on the host
        self.calls += len(refs)
        self.passes += 1
        self.call_s += time.perf_counter() - start
        return logits

    def wait(self, refs: list, timeout_s: float | None = None) -> list:
        """ray.get that fails fast: the first failed call raises ShardFailure at once (its peers may
        be blocked in an all-reduce that will never complete), and so does a stall."""
        import ray
        from ray.exceptions import RayError
        timeout_s = timeout_s or self.spec.call_timeout_s
        deadline, pending = time.monotonic() + timeout_s, list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
                if not ready:
                    self.broken = True
                    raise ShardFailure(f"a shard call did not finish within {timeout_s:.0f} s")
                ray.get(ready)       # host sync: raises if that shard failed
            return ray.get(refs)
        except RayError as e:   # dead actor, error raised in a shard, lost object
            self.broken = True
            raise ShardFailure(f"{type(e).__name__}: {str(e).splitlines()[0]}") from e

    def stats(self, tokens: int) -> dict:
        """Calls and waits of the request; decode_* count from the end of prefill."""
        calls, passes, call_s = (self.calls - self.prefill[0], self.passes - self.prefill[1],
                                 self.call_s - self.prefill[2])
        # compute on the critical path: TP rank 0 of every stage, over the decode passes
        try:
            times = self.wait([stage[0].seconds.remote() for stage in self.stages])
            compute_s = sum(sum(t[max(0, len(t) - passes):]) for t in times) if passes else 0.0
        except ShardFailure:   # figures only: a shard lost after the request's last pass costs them
            compute_s = None
        split = passes and compute_s is not None and not self.restarts   # a restart resets the shards' times
        return dict(tp=self.spec.placement.tp, pp=self.spec.placement.pp, remote_calls=self.calls,
                    forward_passes=self.passes, call_s=round(self.call_s, 4), decode_calls=calls,
                    decode_passes=passes, calls_per_token=round(calls / tokens, 3) if tokens else None,
                    decode_call_s=round(call_s, 4), ms_per_decode_pass=round(1000 * call_s / passes, 3) if passes else None,
                    shard_ms_per_decode_pass=round(1000 * compute_s / passes, 3) if split else None,
                    ray_ms_per_decode_pass=round(1000 * (call_s - compute_s) / passes, 3) if split else None,
                    restarts=self.restarts)

    def mark_prefill_done(self) -> None:
        self.prefill = (self.calls, self.passes, self.call_s)

    def reset_stats(self) -> None:
        self.calls = self.passes = self.restarts = 0
        self.call_s = 0.0
        self.prefill = (0, 0, 0.0)


class RemoteModel:
    """Stands in for the target Transformer in a Level: one remote call per forward pass."""

    counts_rows = True  # the last stage passes last_only on as a row count: only those rows travel back

    def __init__(self, group: ShardGroup, cfg, device: torch.device, dtype: torch.dtype):
        self.group, self.cfg, self.device, self.dtype = group, cfg, device, dtype

    def __call__(self, tokens: torch.Tensor, cache, last_only: int = False) -> torch.Tensor:
        # tokens [1, T] -> logits [1, R, V]: R = last_only rows (all T when False)
        # host sync (.tolist()): token ids travel in the control message, not as a tensor
        return self.group.forward(cache.name, tokens[0].tolist(), last_only).to(self.device)


class RemoteCache:
    """Stands in for a cache that lives in the shards (runtime/cache.py's interface): it records
    what a Level or the engine does to it; the records travel with the next pass. It holds no
    tensors, and any method a Level never calls on it fails loudly."""

    def __init__(self, group: ShardGroup, name: str, kind: str):
        self.group, self.name, self.kind = group, name, kind   # kind: a runtime.modes.CacheSpec kind

    def crop(self, length: int) -> None:
        self.group.record(["crop", self.name, length])

    def commit(self, length: int) -> None:
        """Only a streaming cache acts on commits (full and retrieval caches never evict)."""
        if self.kind == "streaming":
            self.group.record(["commit", self.name, length])

    def fill_from(self, full: "RemoteCache", length: int) -> None:
        self.group.record(["fill", self.name, full.name, length])

    def begin(self, T):  # pragma: no cover - a Level never calls these on a proxy
        raise TypeError(f"cache {self.name!r} lives in the shard actors; only crop/commit/fill_from reach it")

    update = end = get_seq_length = reset = begin
