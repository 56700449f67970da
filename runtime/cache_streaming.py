"""Level 1 of the hierarchy (and the `streaming` ablation): a StreamingLLM cache.

Regions of each layer's buffer [B, Hkv, sinks + window + scratch, D]:
    sink     slots [0, sinks)                 the first tokens of the sequence, never evicted
    recent   slots [sinks, committed)         the most recent committed tokens, oldest first
    scratch  slots [committed, length)        speculative tokens of the round in flight
Keys are rotated by their slot index, so positions never exceed sinks + window + scratch: a
drafter trained on 2K positions serves a 128K prompt. They are stored rotated, as in the other
caches, so a pass only rotates its own tokens and takes the one-call native path (slots()); when
eviction moves the recent region `count` slots left, its keys are turned back by `count` positions
(a pure rotation in fp32, once per evicted block, not per pass).

Only committed tokens are ever evicted (the oldest recent ones, in blocks of `evict_block`, one
shift of the window per block rather than per token), and crop() only removes speculative ones,
so rolling back rejected tokens leaves exactly the window that would be there had they never been
drafted: every committed token in it stays (the reference implementation drops one). commit(n)
tells the cache which tokens are final.
"""
from __future__ import annotations

import torch

from triforce.runtime.config import ModelConfig
from triforce.runtime.rope import Rope


class StreamingCache:
    def __init__(self, cfg: ModelConfig, rope: Rope, batch: int, sinks: int, window: int,
                 device: torch.device, dtype: torch.dtype, scratch: int = 0, evict_block: int | None = None):
        if sinks < 0 or window < 1 or scratch < 0:
            raise ValueError(f"streaming cache needs sinks >= 0, window >= 1, scratch >= 0; got {sinks}, {window}, "
                             f"{scratch}")
        self.capacity = sinks + window + scratch
        shape = (cfg.num_layers, batch, cfg.num_kv_heads, self.capacity, cfg.head_dim)  # [L, B, Hkv, S, D]
        self.k = torch.zeros(shape, device=device, dtype=dtype)  # keys rotated by their slot
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.rope, self.batch, self.sinks, self.window = rope, batch, sinks, window
        self.evict_block = evict_block or max(1, window // 8)
        self.length = 0    # filled slots
        self.committed = 0 # slots holding committed tokens (sinks + recent)
        self.evicted = 0   # tokens of the sequence that were dropped from the recent region
        self.forced_evictions = 0  # passes that had to evict speculative tokens (scratch too small)
        self._new = 0
        self._cos = self._sin = None

    def _evict(self, count: int) -> None:
        """Drops the `count` oldest recent tokens: the rest of the recent region moves `count` slots
        left, its keys turned back by `count` positions."""
        start = self.sinks
        keep = slice(start + count, self.length)
        kept = self.length - keep.start
        self.k[:, :, :, start:start + kept] = self._turn(self.k[:, :, :, keep], -count)
        self.v[:, :, :, start:start + kept] = self.v[:, :, :, keep].clone()
        self.length -= count
        self.committed = max(self.committed - count, min(self.sinks, self.length))
        self.evicted += count

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        if min(self.length, self.sinks) + T > self.capacity:
            raise ValueError(f"a pass of {T} tokens does not fit a streaming cache of {self.sinks} sinks + "
                             f"{self.window} recent slots")
        overflow = self.committed - (self.sinks + self.window)
        if overflow > 0:  # committed tokens beyond the window: drop the oldest, a block at a time
            self._evict(min(self.committed - self.sinks, max(overflow, self.evict_block)))
        if self.length + T > self.capacity:  # scratch too small for this round: stay correct, lose exactness
            self.forced_evictions += 1
            self._evict(self.length + T - self.capacity)
        self._new = T
        self._cos, self._sin = self.rope.span(self.length, T, self.batch)   # [B, T, D]: the new tokens' slots
        return self._cos, self._sin

    def update(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        start, stop = self.length, self.length + self._new
        Rope.rotate(k, self._cos, self._sin, out=self.k[layer, :, :, start:stop])
        self.v[layer, :, :, start:stop] = v
        return self.k[layer, :, :, :stop], self.v[layer, :, :, :stop]   # [B, Hkv, S, D]

    def slots(self):
        """As FullCache.slots: a pass writes its tokens at [length, length + T), keys rotated."""
        return self.k, self.v, self.length, None

    def _turn(self, keys: torch.Tensor, positions: int) -> torch.Tensor:
        """keys [L, B, Hkv, S, D] rotated by `positions` more (RoPE's rotation alone, in fp32, without
        the tables' attention scaling) -> a new tensor of keys' dtype."""
        L, B, H, S, D = keys.shape
        angle = positions * self.rope.inv_freq.float()                # [D/2]
        angle = torch.cat((angle, angle))                             # [D]
        x = keys.float().reshape(L * B, H, S, D)
        turned = Rope.rotate(x, angle.cos().expand(L * B, S, D), angle.sin().expand(L * B, S, D))
        return turned.view(L, B, H, S, D).to(keys.dtype)

    def skip(self, n: int) -> None:
        """Counts n more tokens of the sequence as seen and evicted, without their K/V: a prefill
        that feeds only what the cache would keep (the sinks, then the recent tokens) skips the
        tokens between them. Only while the cache holds at most its sinks and has evicted none."""
        if n and (self.length > self.sinks or self.evicted):
            raise ValueError(f"skip({n}) needs a cache holding at most its {self.sinks} sinks and no evictions; it "
                             f"holds {self.length} slots and evicted {self.evicted}")
        self.evicted += n

    def fill_from(self, full, n: int) -> None:
        """Fills the cache from the first n tokens of a full cache of the same model (its sinks and
        most recent tokens), the keys turned from their positions to their slots: the `streaming`
        mode's target level starts from the prefill instead of a second pass over the prompt."""
        keep = list(range(min(self.sinks, n))) + list(range(max(self.sinks, n - self.window), n))
        index = torch.tensor(keep, device=self.k.device)
        cos, sin = full.rope.tables(index.expand(self.batch, -1))          # [B, m, D], absolute positions
        slot_cos, slot_sin = self.rope.tables(torch.arange(len(keep), device=self.k.device).expand(self.batch, -1))
        for layer in range(self.k.shape[0]):
            full_k, full_v = full.layer_kv(layer)                           # [B, Hkv, n, D]
            keys = full_k.index_select(2, index)                            # [B, Hkv, m, D] rotated
            unrotated = Rope.rotate(keys, cos, -sin)                        # rotation by -position
            Rope.rotate(unrotated, slot_cos, slot_sin, out=self.k[layer, :, :, :len(keep)])
            self.v[layer, :, :, :len(keep)] = full_v.index_select(2, index)
        self.length = self.committed = len(keep)
        self.evicted = n - len(keep)

    def end(self) -> None:
        self.length += self._new
        self._new = 0

    def get_seq_length(self) -> int:
        """Tokens of the sequence this cache has seen (evicted ones included)."""
        return self.evicted + self.length

    def commit(self, length: int) -> None:
        """The sequence's first `length` tokens are final: they may be evicted from now on."""
        self.committed = max(0, min(length - self.evicted, self.length))

    def crop(self, length: int) -> None:
        slots = length - self.evicted
        if not (self.sinks <= slots or self.evicted == 0) or not 0 <= slots <= self.length:
            raise ValueError(f"cannot crop a streaming cache holding tokens [{self.evicted}, "
                             f"{self.get_seq_length()}) to {length}: evicted tokens cannot be restored")
        self.length = slots
        self.committed = min(self.committed, slots)

    def reset(self) -> None:
        self.length = self.evicted = self.committed = 0
