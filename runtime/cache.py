"""The one cache interface every cache policy implements (full, retrieval, streaming, offloaded).

A forward pass over T new tokens calls, in order:
    cos, sin = cache.begin(T)              RoPE tables of the new tokens' positions, [B, T, D]
    k, v = cache.update(layer, q, k, v)    per layer: store the new K/V (k before RoPE, [B, Hkv, T, D])
                                           and return every key/value the queries may see, [B, Hkv, S, D];
                                           q [B, H, T, D] (after RoPE) is shown to the cache so that the
                                           retrieval policy can score chunks with the latest query
    cache.end()                            the T tokens now count in get_seq_length()
and speculation rolls back with crop(n); commit(n) says the first n tokens are final (a policy
that evicts, like the streaming cache, evicts only those). Each policy decides where keys are rotated: the full and
retrieval caches store them rotated at their absolute positions; the streaming cache stores them
rotated by cache slot (and turns them back when eviction moves them), so a short-context drafter
serves any prompt length.
The new tokens are always the last T of the S returned positions (see attention.py).

slots() is optional: a cache whose update() is "rotate k into slots [start, start + T) of
per-layer buffers [L, B, Hkv, capacity, D], store v there, attend to [0, start + T)" returns
(k, v, start, last_query or None), and a CPU pass then runs its layers in one native call
(model.decoder_plan); any other cache (offloaded, packed) goes through update().

fill_from(full, n) fills a cache from the first n tokens of the target's full cache instead of a
prefill pass: each policy knows how (the full cache copies a saved prefill, the retrieval cache
selects chunks, the streaming cache keeps sinks and the recent window, turned to its slots). The engine
calls it for every level that runs on the target's weights, with no per-class dispatch.
"""
from __future__ import annotations

from typing import Protocol

import torch


class KVCache(Protocol):
    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]: ...
    def update(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...
    def end(self) -> None: ...
    def get_seq_length(self) -> int: ...
    def commit(self, length: int) -> None: ...
    def crop(self, length: int) -> None: ...
    def reset(self) -> None: ...
    def fill_from(self, full, length: int) -> None: ...
