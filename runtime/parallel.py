"""Tensor and pipeline parallelism as transforms of a plain model (gpt-fast's tp.py style):
model.py knows nothing about them; a shard is a loaded Transformer with these applied.

Tensor parallel (apply_tp), rank r of `world`, by KV-head groups and MLP columns:
    q_proj   output rows of the G query heads of each local KV head     [E] -> [H/world * D]
    k_proj,  output rows of the local KV heads                           [E] -> [Hkv/world * D]
    v_proj
    o_proj   input columns of the local query heads, then all-reduce     [H/world * D] -> [E]
    gate_proj, up_proj   output rows  [E] -> [F/world]
    down_proj            input columns, then all-reduce                  [F/world] -> [E]
Embedding, norms and lm_head are replicated. A shard's caches are the same cache classes built
from shard_config() (Hkv/world heads): the retrieval cache scores chunks per KV head from that
head's own query group, so each shard selects exactly what the unsharded cache would.

Pipeline parallel (apply_pp): a stage keeps layers [start, stop) (renumbered from 0, as its caches
hold only those), stages after the first take hidden states instead of tokens, stages before
the last return hidden states instead of logits. Unlike TP it changes no arithmetic: PP output
is bit-identical to the plain model.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn as nn

from triforce.runtime.config import ModelConfig
from triforce.runtime.errors import UserError
from triforce.runtime.model import Transformer


def check_tp(cfg: ModelConfig, world: int) -> None:
    if world < 1 or cfg.num_kv_heads % world or cfg.intermediate_size % world:
        divisors = [n for n in range(1, cfg.num_kv_heads + 1)
                    if cfg.num_kv_heads % n == 0 and cfg.intermediate_size % n == 0]
        raise UserError(f"--tp {world} does not divide the model's {cfg.num_kv_heads} KV heads and "
                        f"{cfg.intermediate_size} MLP columns; use --tp in {divisors} and add pipeline "
                        "stages with --pp for more shards")


def stage_layers(num_layers: int, stages: int) -> list[tuple[int, int]]:
    """Layer ranges [start, stop) of `stages` pipeline stages, as even as possible (earlier stages
    take the remainder)."""
    if not 1 <= stages <= num_layers:
        raise UserError(f"--pp {stages} must be between 1 and the model's {num_layers} layers")
    base, extra = divmod(num_layers, stages)
    bounds, start = [], 0
    for s in range(stages):
        stop = start + base + (s < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def shard_config(cfg: ModelConfig, tp: int, layers: tuple[int, int]) -> ModelConfig:
    """The configuration a shard's caches are built from: its layers and its heads."""
    return dataclasses.replace(cfg, num_layers=layers[1] - layers[0], num_heads=cfg.num_heads // tp,
                               num_kv_heads=cfg.num_kv_heads // tp)


def _rows(linear: nn.Linear, start: int, stop: int) -> None:
    linear.weight = nn.Parameter(linear.weight[start:stop].clone(), requires_grad=False)  # [out/world, in]
    if linear.bias is not None:
        linear.bias = nn.Parameter(linear.bias[start:stop].clone(), requires_grad=False)
    linear.out_features = stop - start


def _columns(linear: nn.Linear, start: int, stop: int, keep_bias: bool) -> None:
    linear.weight = nn.Parameter(linear.weight[:, start:stop].clone(), requires_grad=False)  # [out, in/world]
    if linear.bias is not None and not keep_bias:  # the bias is added once, by rank 0, before the sum
        linear.bias = None
    linear.in_features = stop - start


def apply_tp(model: Transformer, rank: int, world: int, all_reduce: Callable[[torch.Tensor], None]) -> Transformer:
    """Keeps rank's slice of every layer; all_reduce(t) sums t in place across the ranks."""
    cfg = model.cfg
    check_tp(cfg, world)
    if world == 1:
        return model
    D, G = cfg.head_dim, cfg.group_size
    kv = cfg.num_kv_heads // world                     # local KV heads
    kv0 = rank * kv                                    # first local KV head
    f = cfg.intermediate_size // world
    hook = lambda _module, _inputs, out: all_reduce(out) or out  # noqa: E731 (in place; returns out)
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        _rows(attn.q_proj, kv0 * G * D, (kv0 + kv) * G * D)        # heads h = kv * G + g (HF order)
        _rows(attn.k_proj, kv0 * D, (kv0 + kv) * D)
        _rows(attn.v_proj, kv0 * D, (kv0 + kv) * D)
        _columns(attn.o_proj, kv0 * G * D, (kv0 + kv) * G * D, keep_bias=rank == 0)
        attn.H, attn.Hkv = kv * G, kv
        _rows(mlp.gate_proj, rank * f, (rank + 1) * f)
        _rows(mlp.up_proj, rank * f, (rank + 1) * f)
        _columns(mlp.down_proj, rank * f, (rank + 1) * f, keep_bias=rank == 0)
        attn.o_proj.register_forward_hook(hook)
        mlp.down_proj.register_forward_hook(hook)
    return model


class HiddenIn(nn.Module):
    """Stands in for the embedding of a stage after the first: its input is the previous stage's
    hidden states (returned in float32 by Transformer.forward, cast back to the model's dtype)."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.dtype)                                    # [B, T, E]


def apply_pp(model: Transformer, start: int, stop: int) -> Transformer:
    """Keeps layers [start, stop). A stage before the last must be called with last_only=False
    (the next stage needs every position); it returns hidden states [B, T, E] as float32."""
    L, dtype = model.cfg.num_layers, model.dtype
    if not 0 <= start < stop <= L:
        raise ValueError(f"layer range [{start}, {stop}) is not within the model's {L} layers")
    kept = list(model.model.layers)[start:stop]
    for layer in kept:
        layer.self_attn.layer -= start     # index into the stage's caches, which hold its layers only
    model.model.layers = nn.ModuleList(kept)
    if start > 0:
        model.model.embed_tokens = HiddenIn(dtype)
    if stop < L:
        model.model.norm = nn.Identity()
        model.lm_head = _HiddenOut(model.lm_head.weight.device, dtype)
    return model


class _HiddenOut(nn.Identity):
    """Replaces lm_head on a stage before the last; keeps Transformer.device/.dtype working."""

    def __init__(self, device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("weight", torch.empty(0, device=device, dtype=dtype), persistent=False)
