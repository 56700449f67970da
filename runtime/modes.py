"""A mode as data: which levels it stacks (smallest proposer first), whose weights each level
runs, the cache each reads and how big it is, and the gammas between levels. The in-process
engine (runtime/engine.py), the Ray coordinator (actors/coordinator.py) and its shards
(actors/shard.py) all build from these specs (STYLE rule 11: never a table per backend).

Sizes, for a request of `capacity` = prompt + max_new_tokens positions:
    full         capacity positions (layers beyond on_chip in the host tier when offloaded)
    retrieval    budget + the generated-token region max_new_tokens + gamma2 + 2
    streaming    sinks + window + scratch; scratch = gamma1 + gamma2 + 2 (the deepest
                 speculation a round can stack up); passes of window // 2 tokens
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_retrieval import RetrievalCache
from triforce.runtime.cache_streaming import StreamingCache
from triforce.runtime.config import ModelConfig, RunConfig


@dataclass(frozen=True)
class CacheSpec:
    kind: str                    # full | retrieval | streaming
    capacity: int = 0            # full, retrieval: positions the request needs (prompt + new tokens)
    on_chip: int | None = None   # full: layers whose KV stays on the device (None: all, or as planned)
    budget: int = 0              # retrieval: prompt tokens selected
    chunk: int = 0               # retrieval: tokens per scored chunk
    generated: int = 0           # retrieval: slots for tokens generated after the selection
    recent: int = 0              # retrieval: last prompt tokens always kept
    sinks: int = 0               # streaming: first tokens always kept
    window: int = 0              # streaming: recent tokens kept
    scratch: int = 0             # streaming: slots for speculative tokens beyond the window

    @property
    def positions(self) -> int:
        """Positions its RoPE table covers: the slots of a streaming cache, else the request."""
        return self.sinks + self.window + self.scratch if self.kind == "streaming" else self.capacity

    def to_dict(self) -> dict:
        """Plain dict for the wire (the coordinator's `new` op to the shards)."""
        return asdict(self)


@dataclass(frozen=True)
class LevelSpec:
    name: str              # drafter | streaming | retrieval | target (the stats' key)
    model: str             # whose weights it runs: drafter | target
    cache: CacheSpec       # the cache it reads
    max_pass: int          # tokens per forward pass while filling it (prefill, catching up)


def mode_levels(run: RunConfig, capacity: int) -> tuple[list[LevelSpec], list[int]]:
    """run.mode's levels, smallest proposer first, and the gammas between them."""
    gamma1, gamma2 = run.gammas
    scratch = gamma1 + gamma2 + 2

    def streaming(name: str, model: str, sinks: int, window: int) -> LevelSpec:
        return LevelSpec(name, model, CacheSpec("streaming", sinks=sinks, window=window, scratch=scratch),
                         max(1, window // 2))

    drafter = streaming("drafter", "drafter", run.draft_sinks, run.draft_window)
    budget = run.budget_for(capacity)
    retrieval = LevelSpec("retrieval", "target", CacheSpec(
        "retrieval", capacity=capacity, budget=budget, chunk=run.chunk_size,
        generated=run.max_new_tokens + gamma2 + 2, recent=run.recent_for(budget)), run.prefill_chunk)
    target = LevelSpec("target", "target", CacheSpec("full", capacity=capacity, on_chip=run.on_chip_layers),
                       run.prefill_chunk)
    if run.mode == "ar":
        return [target], []
    if run.mode == "spec":
        return [drafter, target], [gamma2]
    if run.mode == "retrieval":
        return [retrieval, target], [gamma2]
    if run.mode == "streaming":   # the paper's ablation: the target on a StreamingLLM cache of the budget's size
        sinks = min(run.draft_sinks, budget // 2)
        return [streaming("streaming", "target", sinks, budget - sinks), target], [gamma2]
    return [drafter, retrieval, target], [gamma1, gamma2]


def make_cache(spec: CacheSpec, cfg: ModelConfig, rope, device: torch.device, dtype: torch.dtype):
    """The resident cache a spec describes, for a model of `cfg` (a shard's: its heads and
    layers) with `rope` covering spec.positions. Offloaded full caches are built by the caller
    (offload/ is a layer above)."""
    if spec.kind == "full":
        return FullCache(cfg, rope, 1, spec.capacity, device, dtype)
    if spec.kind == "retrieval":
        return RetrievalCache(cfg, rope, 1, spec.budget, spec.chunk, spec.generated, device, dtype,
                              recent=spec.recent)
    if spec.kind == "streaming":
        return StreamingCache(cfg, rope, 1, spec.sinks, spec.window, device, dtype, scratch=spec.scratch)
    raise ValueError(f"unknown cache kind {spec.kind!r}")
