"""prefill -> decode loop -> stop. The loop is the same for every mode: a mode is a Decoder whose
step() runs one algorithm step (one token for `ar`; drafted, verified and accepted tokens for the
speculative modes) and returns the tokens it committed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch

from runtime.cache import KVCache
from runtime.model import Transformer
from runtime.sampling import SamplingParams, probs_from_logits, sample


def prefill(model: Transformer, tokens: torch.Tensor, cache: KVCache, chunk: int,
            on_progress: Callable[[int], None] | None = None) -> torch.Tensor:
    """Feeds the prompt in chunks of `chunk` tokens (bounded activations); tokens [B, T] -> logits [B, V]
    of the last prompt position."""
    logits = None
    for start in range(0, tokens.shape[1], chunk):
        logits = model(tokens[:, start:start + chunk], cache, last_only=True)[:, -1]  # [B, V]
        if on_progress:
            on_progress(min(start + chunk, tokens.shape[1]))
    return logits


class Decoder(Protocol):
    stats: dict

    def step(self, budget: int) -> list[int]:
        """Commits at least one and at most `budget` tokens; returns them."""


class ARDecoder:
    """Autoregressive decoding on the full cache: the baseline every mode must equal."""

    def __init__(self, model: Transformer, cache: KVCache, last_logits: torch.Tensor,
                 params: SamplingParams, generator: torch.Generator):
        self.model, self.cache, self.params, self.generator = model, cache, params, generator
        self.probs = probs_from_logits(last_logits, params)  # [B, V]
        self.stats = {"target_passes": 0}

    def step(self, budget: int) -> list[int]:
        token = sample(self.probs, self.generator)  # [B]
        if budget > 1:  # the last token needs no forward pass of its own
            logits = self.model(token[:, None], self.cache)[:, -1]  # [B, V]
            self.probs = probs_from_logits(logits, self.params)
            self.stats["target_passes"] += 1
        return token.tolist()  # host sync: the loop needs the token to check EOS and stream text


@dataclass
class Generation:
    token_ids: list[int]                 # new tokens (prompt excluded), EOS included if it came
    stopped_by: str                      # "eos" | "max_new_tokens"
    stats: dict = field(default_factory=dict)


def decode(decoder: Decoder, max_new_tokens: int, eos_ids: tuple[int, ...],
           on_tokens: Callable[[list[int]], None] | None = None) -> Generation:
    """The decode loop: step until max_new_tokens or an EOS token."""
    out: list[int] = []
    while len(out) < max_new_tokens:
        new = decoder.step(max_new_tokens - len(out))
        eos_at = next((i for i, t in enumerate(new) if t in eos_ids), None)
        if eos_at is not None:
            new = new[:eos_at + 1]
        out += new
        if on_tokens:
            on_tokens(new)
        if eos_at is not None:
            return Generation(out, "eos", dict(decoder.stats))
    return Generation(out, "max_new_tokens", dict(decoder.stats))


def timed(fn, *args, **kwargs):
    """(result, seconds) with the device drained, so that GPU time lands in the right phase."""
    device = kwargs.pop("device", None)
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)  # host sync: timing boundary only
    return result, time.perf_counter() - start
