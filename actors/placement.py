"""Where the shard actors go: one placement group per pipeline, one bundle per shard.

A pipeline of one stage is STRICT_PACK (its tensor-parallel shards all-reduce twice per layer: they
must share a machine, and on GPU an NVLink/PCIe switch); a pipeline of several stages is PACK (one
machine when it fits, otherwise stages spread over machines, which only pass hidden states).
CPU-only clusters get bundles without GPUs (num_gpus=0 actors).
"""
from __future__ import annotations

from triforce.runtime.errors import UserError
from triforce.runtime.placement import Placement


def shard_gpus(placement: Placement) -> int:
    """GPUs each shard actor reserves: 0 on CPU-only clusters, else 1."""
    return 0 if placement.device == "cpu" else 1


def bundle(placement: Placement, cpus_per_shard: float) -> dict:
    """One shard's bundle: its CPUs (its torch threads) and its GPU, if any."""
    gpus = shard_gpus(placement)
    return {"CPU": cpus_per_shard, **({"GPU": gpus} if gpus else {})}


def create_placement_group(placement: Placement, cpus_per_shard: float, timeout_s: float = 120.0):
    """Reserves one bundle per shard, or fails naming what is missing (never waits forever)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    strategy, one = "STRICT_PACK" if placement.pp == 1 else "PACK", bundle(placement, cpus_per_shard)
    group = placement_group([one] * placement.devices, strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)   # host sync: cluster scheduling
    if not ready:
        remove_placement_group(group)
        have = {k: v for k, v in ray.cluster_resources().items() if k in ("CPU", "GPU")}
        raise UserError(f"the Ray cluster cannot place {placement.devices} shard(s) of {one} "
                        f"({strategy}) within {timeout_s:.0f} s; it has {have} in all. Lower --tp/--pp, "
                        "lower ray_cpus, or add machines")
    return group
