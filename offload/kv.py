"""The full cache with layers beyond `on_chip` kept in the host tier (level 3 when offloading).

Layers [0, on_chip) live on the device as in FullCache. Each offloaded layer's K/V live in the
host tier and pass through one of two device buffers (slots), layer j in slot j % 2:

    layer i computes in slot s          while  layer i+1's filled K/V ([:length] only) load into
                                               slot 1-s on the load_cache lane
    after layer i writes its new tokens        only those positions [start, stop) go back to the
                                               host tier on the store_cache lane

A load into a slot waits (by events) for the compute that last read the slot and for the store
that last read it, so a buffer is never overwritten early nor read before its copy completed.
The plain twin of this schedule is prefetch=False: every load is issued right when the layer
needs it (tests compare both). Everything else (RoPE, crop, commit, last_query) is FullCache's.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from triforce.offload.tier import Copier, HostTier
from triforce.runtime.cache_full import FullCache
from triforce.runtime.config import ModelConfig
from triforce.runtime.rope import Rope


@dataclass
class Slot:
    layer: int = -1        # the offloaded layer whose K/V the slot holds (-1: none)
    valid: int = 0         # positions [0, valid) of that layer are in the slot
    loaded: object = None  # event: the load into the slot finished
    released: object = None  # event: compute that read the slot finished
    stored: object = None  # event: the write-back that read the slot finished


class OffloadedFullCache(FullCache):
    def __init__(self, cfg: ModelConfig, rope: Rope, batch: int, capacity: int, device: torch.device,
                 dtype: torch.dtype, on_chip: int, tier: HostTier, copier: Copier, name: str = "kv",
                 prefetch: bool = True):
        if not 0 <= on_chip < cfg.num_layers:
            raise ValueError(f"on_chip_layers {on_chip} must be in [0, {cfg.num_layers}) to offload any layer")
        layer_shape = (batch, cfg.num_kv_heads, capacity, cfg.head_dim)          # [B, Hkv, S, D]
        self.k = torch.zeros((on_chip, *layer_shape), device=device, dtype=dtype)  # resident layers
        self.v = torch.zeros((on_chip, *layer_shape), device=device, dtype=dtype)
        self.host_k = tier.allocate(f"{name}-k", (cfg.num_layers - on_chip, *layer_shape), dtype)  # host tier
        self.host_v = tier.allocate(f"{name}-v", (cfg.num_layers - on_chip, *layer_shape), dtype)
        self.slot_k = torch.zeros((2, *layer_shape), device=device, dtype=dtype)   # the two device buffers
        self.slot_v = torch.zeros((2, *layer_shape), device=device, dtype=dtype)
        self.buffers = [Slot(), Slot()]  # events of the two device buffers
        self.store_events: dict[int, object] = {}  # offloaded layer -> its latest write-back
        self.last_query = torch.zeros(cfg.num_layers, batch, cfg.num_heads, cfg.head_dim, device=device, dtype=dtype)
        self.rope, self.batch, self.capacity = rope, batch, capacity
        self.on_chip, self.num_layers, self.tier, self.copier = on_chip, cfg.num_layers, tier, copier
        self.names, self.prefetch = (f"{name}-k", f"{name}-v"), prefetch
        self.length, self._new = 0, 0
        self._cos = self._sin = None

    def slots(self):
        """None: layers beyond on_chip live in the host tier (each pass goes through update())."""
        return None

    def begin(self, T: int):
        tables = super().begin(T)
        released = self.copier.record()  # the previous pass's compute was the slots' last reader
        for slot in self.buffers:
            slot.released = released
        if self.prefetch:
            self._load(self.on_chip)  # the first offloaded layer loads during the resident layers
        return tables

    def storage(self, layer: int):
        if layer < self.on_chip:
            return self.k[layer], self.v[layer]
        s = self._slot(layer)
        self._load(layer)
        self.copier.wait(self.buffers[s].loaded)
        if self.prefetch and layer + 1 < self.num_layers:
            self.buffers[1 - s].released = self.copier.record()  # layer-1 was its last reader
            self._load(layer + 1)
        return self.slot_k[s], self.slot_v[s]

    def stored(self, layer: int, start: int, stop: int) -> None:
        if layer < self.on_chip:
            return
        s, j = self._slot(layer), layer - self.on_chip
        event = self._copy_kv("store_cache", (self.host_k[j], self.host_v[j]), (self.slot_k[s], self.slot_v[s]),
                              slice(start, stop), [self.copier.record()])  # after the new K/V are in the slot
        slot = self.buffers[s]
        slot.stored, slot.valid = event, stop
        self.store_events[layer] = event

    def layer_kv(self, layer: int):
        if layer < self.on_chip:
            return super().layer_kv(layer)
        j, n = layer - self.on_chip, self.length
        k = torch.empty_like(self.slot_k[0, :, :, :n])
        v = torch.empty_like(self.slot_v[0, :, :, :n])
        after = [e for e in (self.store_events.get(layer),) if e is not None]
        self.copier.wait(self._copy_kv("load_cache", (k, v), (self.host_k[j], self.host_v[j]), slice(0, n), after))
        return k, v

    def write_layer(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        if layer < self.on_chip:
            return super().write_layer(layer, k, v)
        j, n = layer - self.on_chip, k.shape[2]
        self.store_events[layer] = self._copy_kv("store_cache", (self.host_k[j], self.host_v[j]), (k, v), slice(0, n),
                                                 [self.copier.record()])
        for slot in self.buffers:
            if slot.layer == layer:
                slot.layer, slot.valid = -1, 0

    def crop(self, length: int) -> None:
        super().crop(length)
        for slot in self.buffers:
            slot.valid = min(slot.valid, length)

    def reset(self) -> None:
        super().reset()
        for slot in self.buffers:
            slot.valid = 0

    def close(self) -> None:
        """Returns the host-tier arenas (after every pending copy finished)."""
        self.copier.drain()
        self.host_k = self.host_v = None
        for name in self.names:
            self.tier.free(name)

    def _slot(self, layer: int) -> int:
        return (layer - self.on_chip) % 2

    def _load(self, layer: int) -> None:
        """Issues the load of `layer`'s filled K/V into its slot, unless the slot already holds them."""
        slot, s, j, n = self.buffers[self._slot(layer)], self._slot(layer), layer - self.on_chip, self.length
        if slot.layer == layer and slot.valid >= n:
            return
        if not self.prefetch:
            slot.released = self.copier.record()
        after = [e for e in (slot.released, slot.stored, self.store_events.get(layer)) if e is not None]
        slot.loaded = self._copy_kv("load_cache", (self.slot_k[s], self.slot_v[s]), (self.host_k[j], self.host_v[j]),
                                    slice(0, n), after)
        slot.layer, slot.valid = layer, n

    def _copy_kv(self, lane: str, dst: tuple, src: tuple, positions: slice, after: list):
        """Copies positions of K and V ([B, Hkv, S, D] each) on one lane; the event covers both (a lane is FIFO)."""
        for d, s in zip(dst, src):
            event = self.copier.copy(lane, d[:, :, positions], s[:, :, positions], after)
        return event
