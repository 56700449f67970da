"""A shard of the target: its pipeline stage's layers, its tensor-parallel heads, and its slice of
every cache of the request in flight (full, retrieval, streaming: the same cache classes as the
in-process path, built with the shard's heads and layers).

ShardState is plain Python (usable and tested without Ray); ShardActor is the thin Ray shell that
adds the torch.distributed group. The coordinator talks to a shard with one call per forward
pass: `run(control, hidden)`, where `control` is a msgpack list of small ops applied in order

    ["new", {name: cache spec}]       allocate the request's caches (see RayEngine.build_stack)
    ["crop", name, n]                 cache.crop(n)       (speculation rolled back)
    ["commit", name, n]               cache.commit(n)     (streaming caches evict only committed tokens)
    ["fill", name, source, n]         caches[name].fill_from(caches[source], n)   (retrieval, streaming)
    ["forward", name, tokens, last_only]   the pass itself; always last

and `hidden` is the previous stage's output (a Ray object reference resolved by Ray, never part of
the control message). Crops and commits cost no call of their own: they travel with the next pass.
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import msgpack
import torch

from triforce.runtime.config import ModelConfig, with_rope_scaling
from triforce.runtime.model import TORCH_DTYPES, load_model
from triforce.runtime.modes import CacheSpec, make_cache
from triforce.runtime.parallel import apply_pp, apply_tp, check_tp, shard_config, stage_layers
from triforce.runtime.probes import resolve_device
from triforce.runtime.rope import Rope


class ShardState:
    """weights: a host-tier manifest (the node's memory actor) to map instead of reading the
    checkpoint; None reads the files."""

    def __init__(self, model_dir: str, dtype: str, device: str, rope_scaling: str | None,
                 tp: int, pp: int, stage: int, tp_rank: int, weights: dict | None = None):
        cfg = with_rope_scaling(ModelConfig.from_dir(model_dir), rope_scaling)
        check_tp(cfg, tp)
        self.layers = stage_layers(cfg.num_layers, pp)[stage]
        self.full_cfg, self.cfg = cfg, shard_config(cfg, tp, self.layers)   # cfg: what the caches hold
        self.tp, self.tp_rank, self.stage, self.pp = tp, tp_rank, stage, pp
        self.first, self.last = stage == 0, stage == pp - 1
        self.device, self.dtype = resolve_device(device), TORCH_DTYPES[dtype]
        if weights is None:    # from the checkpoint files
            model, self.arena = load_model(Path(model_dir), dtype, self.device, cfg), None
        else:                  # from the node's host tier (actors/memory.py); keep the mapping alive
            from triforce.actors.memory import model_from_manifest
            model, self.arena = model_from_manifest(weights, cfg, self.device)
        self.model = apply_pp(model, *self.layers)
        self.caches: dict[str, object] = {}
        self.seconds: list[float] = []   # wall time of each run() in this shard (compute + cache ops)

    def shard(self, all_reduce) -> None:
        """Keeps this rank's heads and MLP columns (after the process group exists)."""
        apply_tp(self.model, self.tp_rank, self.tp, all_reduce)

    def rope(self, positions: int) -> Rope:
        return Rope(self.full_cfg, positions, self.device, self.dtype)

    def new_request(self, spec: dict) -> None:
        """Allocates the request's caches; `spec` maps a cache name to its CacheSpec (as a dict)."""
        for cache in self.caches.values():
            if hasattr(cache, "close"):   # the previous request's offloaded cache returns its arenas
                cache.close()
        self.caches = {}
        ropes: dict[int, Rope] = {}   # full and retrieval share one table
        for name, fields in spec.items():
            s = CacheSpec(**fields)
            if s.positions not in ropes:
                ropes[s.positions] = self.rope(s.positions)
            rope = ropes[s.positions]
            on_chip = self.local_on_chip(s.on_chip)
            if s.kind == "full" and on_chip is not None:
                self.caches[name] = self.offloaded_cache(rope, s.capacity, on_chip)
            else:
                self.caches[name] = make_cache(s, self.cfg, rope, self.device, self.dtype)

    def local_on_chip(self, on_chip: int | None) -> int | None:
        """The run's on_chip_layers (counted over the whole model) within this stage's layers;
        None when every layer of the stage keeps its KV on the device."""
        first, stop = self.layers
        if on_chip is None or on_chip >= stop:
            return None
        return max(0, on_chip - first)

    def offloaded_cache(self, rope: Rope, capacity: int, on_chip: int):
        """The full cache with this stage's layers beyond on_chip in the node's host tier (the same
        offload/ code as the in-process path); this shard issues the copies to its own device."""
        from triforce.offload.kv import OffloadedFullCache
        from triforce.offload.tier import Copier, HostTier
        if getattr(self, "tier", None) is None:
            self.tier, self.copier, self.requests = HostTier(self.device), Copier(self.device), 0
        self.requests += 1
        return OffloadedFullCache(self.cfg, rope, 1, capacity, self.device, self.dtype, on_chip, self.tier,
                                  self.copier, name=f"kv-{self.requests}")

    def run(self, ops: list, hidden: torch.Tensor | None) -> torch.Tensor | None:
        """Applies the control ops; returns the pass's logits [1, T|1, V] (last stage) or hidden
        states [1, T, E] (other stages), from TP rank 0 only (the other ranks hold the same)."""
        out, start = None, time.perf_counter()
        for op in ops:
            kind, name = op[0], op[1]
            if kind == "new":
                self.new_request(name)
            elif kind == "crop":
                self.caches[name].crop(op[2])
            elif kind == "commit":
                self.caches[name].commit(op[2])
            elif kind == "fill":
                self.caches[name].fill_from(self.caches[op[2]], op[3])
            elif kind == "forward":
                x = torch.tensor([op[2]], device=self.device) if self.first else hidden.to(self.device)  # [1, T] | [1, T, E]
                out = self.model(x, self.caches[name], last_only=op[3] if self.last else False)  # a row count
            else:
                raise ValueError(f"unknown control op {op!r}")
        self.seconds.append(time.perf_counter() - start)
        if out is None or self.tp_rank != 0:
            return None
        return out if out.device.type == "cpu" else out.cpu()  # host sync: results travel through the object store


def listen_socket(address: str):
    """A listening TCP socket on `address` (the node's cluster address), port chosen by the OS:
    the process group's rendezvous store serves on it, never on every interface (0.0.0.0)."""
    import socket
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen(128)
    return sock


class ShardActor:
    """Thin Ray shell over ShardState (decorated with ray.remote by actors/group.py)."""

    def __init__(self, threads: int, **state):
        torch.set_num_threads(threads)
        self.state = ShardState(**state)
        self.exit_in: int | None = None
        self.store_socket = None   # rank 0: the rendezvous store's listening socket, bound in rendezvous()

    def rendezvous(self) -> tuple[str, int]:
        """Address and port for the process group (asked of global rank 0), already bound to this
        node's cluster address, so that no other process can take the port in between."""
        import ray
        address = ray.util.get_node_ip_address()
        self.store_socket = listen_socket(address)
        return address, self.store_socket.getsockname()[1]

    def connect(self, address: str, port: int, rank: int, world: int, groups: list[list[int]],
                timeout_s: float) -> None:
        """Joins the torch.distributed group (NCCL on GPU, gloo on CPU) and shards the model; every
        rank creates every TP group, in the same order, as torch.distributed requires."""
        import torch.distributed as dist
        backend = "nccl" if self.state.device.type == "cuda" else "gloo"
        timeout = timedelta(seconds=timeout_s)
        if rank == 0:   # the store serves on the socket rendezvous() bound to the cluster address
            store = dist.TCPStore(address, port, world, True, timeout, master_listen_fd=self.store_socket.fileno())
        else:
            store = dist.TCPStore(address, port, world, False, timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
        mine = None
        for ranks in groups:
            group = dist.new_group(ranks)
            if rank in ranks:
                mine = group
        self.state.shard(lambda t: dist.all_reduce(t, group=mine))

    def ready(self) -> bool:
        return True

    def run(self, control: bytes, hidden: torch.Tensor | None = None) -> torch.Tensor | None:
        if self.exit_in is not None:
            self.exit_in -= 1
            if self.exit_in <= 0:
                os._exit(1)   # fault injection: the process dies mid-request, as a crashed shard would
        return self.state.run(msgpack.unpackb(control), hidden)

    def seconds(self) -> list[float]:
        """Wall time of each run() so far (the coordinator subtracts it from its waits)."""
        return self.state.seconds

    def exit_after(self, calls: int) -> None:
        """Fault injection for tests: the process exits at its `calls`-th run() from now."""
        self.exit_in = calls
