"""The decode loop: the same for every mode. A mode is a Decoder (speculate.SpecDecoder over that
mode's stack of levels) whose step() runs one algorithm step (one token for `ar`; drafted,
verified and accepted tokens for the speculative modes) and returns the tokens it committed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch


class Decoder(Protocol):
    stats: dict

    def step(self, budget: int) -> list[int]:
        """Commits at least one and at most `budget` tokens; returns them."""


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


def pass_timed(forward, *args, **kwargs) -> tuple[torch.Tensor, float]:
    """timed(forward, ...) for one model pass: its wall time, or for a model of batched decoding
    (decode_batched.SequenceModel) the time of the packed pass that served it, without the wait
    for other sequences' passes on other weights."""
    out, seconds = timed(forward, *args, **kwargs)
    reported = getattr(forward, "last_seconds", None)
    return out, seconds if reported is None else reported
