"""Where the shard actors go: one placement group per pipeline, one bundle per shard.

A pipeline of one stage is STRICT_PACK (its tensor-parallel shards all-reduce twice per layer: they
must share a machine, and on GPU an NVLink/PCIe switch); a pipeline of several stages is PACK (one
machine when it fits, otherwise stages spread over machines, which only pass hidden states).
CPU-only clusters get bundles without GPUs (num_gpus=0 actors).
"""
from __future__ import annotations

from dataclasses import dataclass

from runtime.errors import UserError


@dataclass(frozen=True)
class Placement:
    tp: int                  # shards per pipeline stage (tensor parallel)
    pp: int                  # pipeline stages
    cpus_per_shard: float    # CPUs reserved per shard actor (its torch threads: max(1, int(this)))
    gpus_per_shard: int      # 0 on CPU-only clusters, else 1

    @property
    def shards(self) -> int:
        return self.tp * self.pp

    @property
    def strategy(self) -> str:
        return "STRICT_PACK" if self.pp == 1 else "PACK"

    @property
    def bundle(self) -> dict:
        return {"CPU": self.cpus_per_shard, **({"GPU": self.gpus_per_shard} if self.gpus_per_shard else {})}

    @property
    def threads(self) -> int:
        return max(1, int(self.cpus_per_shard))


def create_placement_group(placement: Placement, timeout_s: float = 120.0):
    """Reserves the bundles, or fails naming what is missing (never waits forever)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    group = placement_group([placement.bundle] * placement.shards, strategy=placement.strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)   # host sync: cluster scheduling
    if not ready:
        remove_placement_group(group)
        have = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
        raise UserError(f"the Ray cluster cannot place {placement.shards} shard(s) of {placement.bundle} "
                        f"({placement.strategy}) within {timeout_s:.0f} s; it has {have} in all. Lower --tp/--pp, "
                        "lower ray_cpus, or add machines")
    return group
