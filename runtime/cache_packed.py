"""PackedCache: the cache the model's own forward sees when the new tokens of several sequences
are packed along T (tokens [1, ΣT], sequence 0's T_0 first), each sequence keeping its own cache
of any policy. Norms, projections and the MLP run once over the ΣT rows (the weights are read
once for all sequences: runtime/decode_batched.py); attention runs per sequence on its own cache, so
ragged lengths need no padding or masks and a sequence's logits do not depend on its neighbours.

It stands for the caches during one pass: begin/end as in runtime/cache.py, and attend in place of
update, because several sequences' keys are tensors of different lengths S_i. Rolling back and
committing stay with each sequence's own cache.
"""
from __future__ import annotations

from itertools import accumulate

import torch

from triforce.runtime.attention import attend


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

    def slots_each(self) -> list[tuple] | None:
        """Each sequence's cache's slots (FullCache.slots: k, v, start, last_query), for the
        decoder plan's packed pass in one native call (DecoderPlan.run_packed); None where a cache
        has none (the model then runs layer by layer, through attend)."""
        slots = [cache.slots() if hasattr(cache, "slots") else None for cache in self.caches]
        return None if any(s is None for s in slots) else slots

    def end(self) -> None:
        for cache in self.caches:
            cache.end()

    def rows(self, last: list[int], device: torch.device) -> torch.Tensor:
        """Indices of each sequence's last `last[i]` rows among the ΣT packed ones, [Σ last]."""
        return torch.cat([torch.arange(end - n, end, device=device) for n, end in zip(last, accumulate(self.sizes))])
