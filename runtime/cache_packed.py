"""Several sequences in one forward pass of the model: PackedCache is the cache the model's own
forward sees when the new tokens of N sequences are packed along T, each sequence keeping its
own cache (any policy), positions and fill length:

    tokens   [1, ΣT]         sequence 0's T_0 new tokens, then sequence 1's T_1, ...
    begin    [1, ΣT, D]      every cache's RoPE tables for its own positions, concatenated
    attend   per layer       q/k/v are split per sequence; each sequence's cache stores its K/V
                             (cache.update) and its queries attend to its own keys
    end                      every cache's end()

Everything else in the layer (norms, projections, MLP) runs once over the ΣT rows, so the
weights are read once for all N sequences: that is the batching gain. Ragged lengths need no
padding and no masks, and a sequence's logits do not depend on its neighbours.

It stands for the caches for one pass only: begin/attend/end are the part of the cache
interface (runtime/cache.py) a forward pass uses, with attend in place of update because N
sequences' keys are N tensors of different lengths S_i. Rolling back (crop) and committing stay
with each sequence's own cache.
"""
from __future__ import annotations

from itertools import accumulate

import torch

from runtime.attention import attend


class PackedCache:
    def __init__(self, caches: list, sizes: list[int]):
        self.caches = caches   # one KVCache per sequence
        self.sizes = sizes     # T_i: new tokens of sequence i in this pass

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        if T != sum(self.sizes):
            raise ValueError(f"a packed pass of {T} tokens for sequences of {self.sizes} new tokens")
        tables = [cache.begin(n) for cache, n in zip(self.caches, self.sizes)]   # each [1, T_i, D]
        return torch.cat([c for c, _ in tables], dim=1), torch.cat([s for _, s in tables], dim=1)  # [1, ΣT, D]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [1, H, ΣT, D] (after RoPE), k/v [1, Hkv, ΣT, D] -> [1, ΣT, H, D], each sequence's
        queries attending to its own cache."""
        parts = zip(self.caches, q.split(self.sizes, 2), k.split(self.sizes, 2), v.split(self.sizes, 2))
        return torch.cat([attend(q_i, *cache.update(layer, q_i, k_i, v_i))        # [1, T_i, H, D]
                          for cache, q_i, k_i, v_i in parts], dim=1)

    def end(self) -> None:
        for cache in self.caches:
            cache.end()

    def rows(self, last: list[int], device: torch.device) -> torch.Tensor:
        """Indices of each sequence's last `last[i]` rows among the ΣT packed ones, [Σ last]."""
        return torch.cat([torch.arange(end - n, end, device=device) for n, end in zip(last, accumulate(self.sizes))])
