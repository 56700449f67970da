"""Rotary position embeddings with the scaling types Llama-family checkpoints use.

Frequencies follow transformers' `modeling_rope_utils` (default, linear, dynamic NTK, llama3, yarn).
One deliberate difference: dynamic NTK fixes its base for the whole run (from the run's total
length, prompt + new tokens), where transformers recomputes it at every forward pass. Speculative
decoding rolls the cache back and re-rotates streaming keys, so every key of a run must share one
rotation; for runs within the original length both are identical.
"""
from __future__ import annotations

import math

import torch

from triforce.runtime.config import ModelConfig
from triforce.runtime.ops import rope


def inverse_frequencies(cfg: ModelConfig, run_length: int) -> tuple[torch.Tensor, float]:
    """Returns (inv_freq [D/2] float32, attention_scaling) for a run of `run_length` positions."""
    dim, base = cfg.head_dim, cfg.rope_theta
    scaling = cfg.rope_scaling or {}
    kind = cfg.rope_type
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    if kind == "dynamic":
        original = scaling.get("original_max_position_embeddings", cfg.max_position_embeddings)
        length = max(run_length, original)
        factor = scaling["factor"]
        base = base * ((factor * length / original) - (factor - 1)) ** (dim / (dim - 2))
    inv_freq = 1.0 / (base ** exponents)
    if kind == "linear":
        return inv_freq / scaling["factor"], 1.0
    if kind == "llama3":
        return _llama3(inv_freq, scaling), 1.0
    if kind == "yarn":
        return _yarn(cfg, scaling)
    return inv_freq, 1.0


def _llama3(inv_freq: torch.Tensor, s: dict) -> torch.Tensor:
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old_len = s["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < old_len / high) & ~(wavelen > old_len / low)
    return torch.where(medium, smoothed, scaled)


def _yarn(cfg: ModelConfig, s: dict) -> tuple[torch.Tensor, float]:
    dim, base, factor = cfg.head_dim, cfg.rope_theta, s["factor"]
    original = s.get("original_max_position_embeddings", cfg.max_position_embeddings)

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention_factor = s.get("attention_factor")
    if attention_factor is None:
        if s.get("mscale") and s.get("mscale_all_dim"):
            attention_factor = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"])
        else:
            attention_factor = mscale(factor)
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
    extrapolation = 1 - ramp
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv_freq, float(attention_factor)


TABLE_ROWS = 64   # the cos/sin table grows in multiples of this many positions (see Rope.span)


class Rope:
    """cos/sin tables for given positions, and the rotation itself (HF's rotate_half convention).
    The values come from one table per Rope (positions [0, rows), grown by doubling): a pass takes
    a slice of it (span) instead of ~12 small ops (0.2 ms a pass on the 2-core Xeon, a fifth of a
    drafter pass), and every pass of a run sees the same bits for a position whatever its length.
    Rows are a multiple of TABLE_ROWS, so torch's vectorized cos/sin computes every position (no
    scalar tail): a position's value does not depend on the table's size.
    The table is built for the run's `run_length` positions up front: grown inside a pass, it cost
    that pass 7 ms at 8K (16K rows), and when the pass was one of `--gamma auto`'s start-up probes
    (a prompt one short of a multiple of TABLE_ROWS puts the growth in the first 2-token pass) the
    middle level's 2-token pass was priced at 1.7x its cost for the whole run (docs/BENCHMARKS.md,
    round 38)."""

    def __init__(self, cfg: ModelConfig, run_length: int, device: torch.device, dtype: torch.dtype):
        inv_freq, self.attention_scaling = inverse_frequencies(cfg, run_length)
        self.inv_freq = inv_freq.to(device)
        self.dtype = dtype
        self._cos = self._sin = None                            # [rows, D] in dtype
        self._table(run_length)

    def _table(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The table, grown to hold positions [0, end)."""
        rows = 0 if self._cos is None else self._cos.shape[0]
        if end > rows:
            rows = -(-max(end, 2 * rows) // TABLE_ROWS) * TABLE_ROWS
            freqs = torch.arange(rows, device=self.inv_freq.device).float()[:, None] * self.inv_freq  # [rows, D/2]
            emb = torch.cat((freqs, freqs), dim=-1)             # [rows, D]
            self._cos = (emb.cos() * self.attention_scaling).to(self.dtype)
            self._sin = (emb.sin() * self.attention_scaling).to(self.dtype)
        return self._cos, self._sin

    def span(self, start: int, T: int, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [batch, T, D] of positions start .. start + T - 1 (views of the table)."""
        cos, sin = self._table(start + T)
        return (cos[start:start + T].unsqueeze(0).expand(batch, T, -1),
                sin[start:start + T].unsqueeze(0).expand(batch, T, -1))

    def tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, T] int64 -> cos, sin [B, T, D] in the model dtype (the table's rows)."""
        cos, sin = self._table(int(positions.max()) + 1 if positions.numel() else 0)
        return cos[positions], sin[positions]

    @staticmethod
    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """x [B, h, T, D], cos/sin [B, T, D] -> [B, h, T, D], into `out` (e.g. a cache slice) when given."""
        return rope(x, cos, sin, out)
