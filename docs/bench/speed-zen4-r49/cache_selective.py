"""The first form of a per-pass choice (round 49), for stepsel.py and churn.py: a middle level that owns no
K/V and reads, in each layer of each pass, the chunks of the target's own full cache that the pass's queries
pick, writing its own new tokens into the full cache's buffers (the target's verify pass overwrites them).

    score[b, h, c] = max over the pass's T rows of sum over the G query heads of q . mean_c
    kept           = chunk 0 (sinks), the best chunks of [1, C - recent_chunks), then every position from
                     the last `recent_chunks` whole chunks to the pass's end

The max over the T rows makes a row's distribution depend on the later rows (the drafts under test): fine
for greedy agreement, not lossless at T > 0 (see docs/BENCHMARKS.md, round 49). Module path only (torch
gather + the attention kernel over the gathered K/V); the kept form is select_step.patch.
"""
from __future__ import annotations

import torch

from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_retrieval import select_positions
from triforce.runtime.rope import Rope


def chunk_means(keys: torch.Tensor, chunk: int) -> torch.Tensor:
    """keys [B, Hkv, C*chunk, D] (whole chunks only) -> the chunks' mean keys [B, Hkv, C, D] (fp32 sums, keys' dtype)."""
    B, Hkv, S, D = keys.shape
    return keys.float().view(B, Hkv, S // chunk, chunk, D).mean(dim=3).to(keys.dtype)


def pass_scores(means: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """means [B, Hkv, C, D], q [B, H, T, D] (rotated) -> [B, Hkv, C]: per chunk, the most any of the T rows
    puts on its mean key, each row's G query heads summed."""
    B, Hkv, C, D = means.shape
    grouped = q.float().view(B, Hkv, -1, q.shape[2], D)                        # [B, Hkv, G, T, D]
    return torch.einsum("bhgtd,bhcd->bhtc", grouped, means.float()).amax(dim=2)


class SelectiveCache:
    def __init__(self, budget: int, chunk: int, recent: int = 0):
        if budget < 2 * chunk:
            raise ValueError(f"retrieval budget {budget} must hold at least two chunks of {chunk}")
        self.budget, self.chunk, self.recent_chunks = budget, chunk, recent // chunk
        self.full: FullCache | None = None
        self.means = None   # [L, B, Hkv, C, D]: the context's whole chunks' mean keys
        self.context = 0
        self.length = 0
        self._new = 0
        self._cos = self._sin = None

    def fill_from(self, full: FullCache, n: int) -> None:
        if type(full) is not FullCache:
            raise ValueError(f"a selective retrieval cache reads a resident FullCache, not a {type(full).__name__}")
        self.full, self.context, self.length = full, n, n
        whole = n // self.chunk * self.chunk
        L, B, Hkv, _, D = full.k.shape
        self.means = torch.empty(L, B, Hkv, whole // self.chunk, D, dtype=full.k.dtype, device=full.k.device)
        for layer in range(L):
            self.means[layer] = chunk_means(full.k[layer, :, :, :whole], self.chunk)

    def selection(self) -> tuple[int, int, int]:
        """(n_pick, end, tail): a pass reads chunk 0, the n_pick best chunks of [1, end), and positions [tail, stop)."""
        C = self.means.shape[3]
        recent = min(self.recent_chunks, C - 1)
        tail_partial = self.context - C * self.chunk
        n_pick = (self.budget - tail_partial) // self.chunk - 1 - recent
        return n_pick, C - recent, (C - recent) * self.chunk

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.length + T > self.full.capacity:
            raise ValueError(f"cache capacity {self.full.capacity} exceeded: {self.length} filled + {T} new")
        self._new = T
        self._cos, self._sin = self.full.rope.span(self.length, T, self.full.batch)
        return self._cos, self._sin

    def update(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        start, stop = self.length, self.length + self._new
        keys, values = self.full.k[layer], self.full.v[layer]
        Rope.rotate(k, self._cos, self._sin, out=keys[:, :, start:stop])
        values[:, :, start:stop] = v
        if self.context <= self.budget:
            return keys[:, :, :stop], values[:, :, :stop]
        n_pick, end, tail = self.selection()
        scores = pass_scores(self.means[layer], q)
        pos = select_positions(scores[:, :, :end], self.chunk, n_pick + 1, 0)
        B, Hkv = pos.shape[:2]
        pos = torch.cat([pos, torch.arange(tail, stop).expand(B, Hkv, stop - tail)], dim=-1)
        index = pos[..., None].expand(-1, -1, -1, keys.shape[-1])
        return keys.gather(2, index), values.gather(2, index)

    # as the full cache's: the fill mark moves, nothing is evicted
    end, get_seq_length, commit = FullCache.end, FullCache.get_seq_length, FullCache.commit

    def crop(self, length: int) -> None:
        if not self.context <= length <= self.length:
            raise ValueError(f"cannot crop a selective cache of context {self.context} to {length}")
        self.length = length

    def reset(self) -> None:
        self.full, self.means, self.context, self.length = None, None, 0, 0
