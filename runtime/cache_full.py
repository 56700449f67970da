"""Level 3 of the hierarchy: the full KV cache, preallocated once for the whole run.

Layout: self.k[l] and self.v[l] are [B, Hkv, capacity, D]; positions [0, length) are filled, keys
rotated at their absolute positions. crop(n) is O(1): it only moves the fill mark, so rolling back
rejected speculative tokens costs nothing. The query of the last token each layer saw is kept
(last_query) because the retrieval cache scores the prompt's chunks with it.

Where a layer's K/V live is behind two hooks, so that the offloaded cache (offload/kv.py) changes
only that: storage(layer) gives the device buffers the layer's pass writes and attends to, and
stored(layer, start, stop) is told when the pass wrote positions [start, stop). Readers of the
whole cache (every fill_from: the retrieval rebuild, the streaming level's start, a saved
prefill) go through layer_kv(layer) and write_layer(layer, k, v).
"""
from __future__ import annotations

import torch

from triforce.runtime.config import ModelConfig
from triforce.runtime.rope import Rope


class FullCache:
    def __init__(self, cfg: ModelConfig, rope: Rope, batch: int, capacity: int,
                 device: torch.device, dtype: torch.dtype):
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, capacity, cfg.head_dim)  # [L, B, Hkv, S, D]
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.last_query = torch.zeros(cfg.num_layers, batch, cfg.num_heads, cfg.head_dim,
                                      device=device, dtype=dtype)  # [L, B, H, D]
        self.rope, self.batch, self.capacity = rope, batch, capacity
        self.length = 0     # filled positions
        self._new = 0       # tokens of the pass in flight (between begin and end)
        self._cos = self._sin = None

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.length + T > self.capacity:
            raise ValueError(f"cache capacity {self.capacity} exceeded: {self.length} filled + {T} new")
        self._new = T
        self._cos, self._sin = self.rope.span(self.length, T, self.batch)  # [B, T, D]
        return self._cos, self._sin

    def update(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        start, stop = self.length, self.length + self._new
        keys, values = self.storage(layer)                             # [B, Hkv, capacity, D]
        Rope.rotate(k, self._cos, self._sin, out=keys[:, :, start:stop])
        values[:, :, start:stop] = v
        self.last_query[layer] = q[:, :, -1]
        self.stored(layer, start, stop)
        return keys[:, :, :stop], values[:, :, :stop]                  # [B, Hkv, S, D]

    def slots(self):
        """(k, v [L, B, Hkv, capacity, D], start, last_query [L, B, H, D]): a pass writes its T
        tokens at [start, start + T) of each layer, keys rotated, and attends to [0, start + T),
        as update() does (model.DecoderPlan runs that in one native call). None where a layer's
        K/V are not simply these buffers (the offloaded cache)."""
        return self.k, self.v, self.length, self.last_query

    def storage(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The device buffers holding `layer`'s K/V, [B, Hkv, capacity, D] each."""
        return self.k[layer], self.v[layer]

    def stored(self, layer: int, start: int, stop: int) -> None:
        """Called once a pass wrote positions [start, stop) of `layer` (the offloaded cache writes them back)."""

    def layer_kv(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The filled K/V of `layer` on the device, [B, Hkv, length, D] each (keys rotated)."""
        return self.k[layer, :, :, :self.length], self.v[layer, :, :, :self.length]

    def write_layer(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Sets positions [0, n) of `layer` from k/v [B, Hkv, n, D] (restoring a saved prefill)."""
        n = k.shape[2]
        self.k[layer, :, :, :n], self.v[layer, :, :, :n] = k, v

    def fill_from(self, full: "FullCache", length: int) -> None:
        """Holds the first `length` tokens of `full`, another full cache of the same model: a saved
        prefill restored, or the prefill being saved (into a resident cache of `length` positions)."""
        if length > self.capacity:
            raise ValueError(f"cannot fill {length} tokens into a full cache of capacity {self.capacity}")
        for layer in range(self.last_query.shape[0]):
            k, v = full.layer_kv(layer)                              # [B, Hkv, n, D]
            self.write_layer(layer, k[:, :, :length], v[:, :, :length])
        self.last_query.copy_(full.last_query)
        self.length = length

    def end(self) -> None:
        self.length += self._new
        self._new = 0

    def get_seq_length(self) -> int:
        return self.length

    def commit(self, length: int) -> None:
        """Nothing to do: this policy never evicts."""

    def crop(self, length: int) -> None:
        if not 0 <= length <= self.length:
            raise ValueError(f"cannot crop a cache of {self.length} tokens to {length}")
        self.length = length

    def reset(self) -> None:
        self.length = 0
