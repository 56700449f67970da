"""The student and how it is scored: a cache-free forward over whole windows (every position is
a prediction), the KL loss against the teacher, and the held-out metrics."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F

from triforce.runtime.config import ModelConfig
from triforce.runtime.model import Transformer, load_model
from triforce.runtime.rope import Rope


class NoCache:
    """The cache interface for one causal pass over whole windows, positions 0..T-1, nothing
    kept: what training needs (every position of a window is a prediction)."""

    def __init__(self, rope: Rope, batch: int):
        self.rope, self.batch = rope, batch
        self._cos = self._sin = None

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        self._cos, self._sin = self.rope.span(0, T, self.batch)  # [B, T, D]
        return self._cos, self._sin

    def update(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return Rope.rotate(k, self._cos, self._sin), v      # [B, Hkv, T, D]: S == T

    def end(self) -> None:
        self._cos = self._sin = None

    def get_seq_length(self) -> int:
        return 0

    def commit(self, length: int) -> None:
        pass  # nothing kept, nothing to evict

    def crop(self, length: int) -> None:
        if length != 0:
            raise ValueError(f"NoCache holds nothing; cannot crop to {length}")

    def reset(self) -> None:
        pass


def window_logits(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """tokens [B, T] -> logits [B, T, V] float32; autograd on if the model has trainable params."""
    B, T = tokens.shape
    return model.logits(tokens, NoCache(model.rope(T), B))


def teacher_logits(teacher: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    # no_grad, not inference_mode: the KL's backward saves these logits, and inference tensors
    # cannot be saved for backward.
    with torch.no_grad():
        return window_logits(teacher, tokens)  # [B, T, V]


def build_student(source_dir: Path, layers: int, device: torch.device) -> Transformer:
    """The first `layers` decoder layers + final norm of the checkpoint in source_dir (the target
    for a new run, the run's own checkpoint on resume), fp32; only layers and norm train."""
    cfg = dataclasses.replace(ModelConfig.from_dir(source_dir), num_layers=layers)
    student = load_model(source_dir, "fp32", device, cfg=cfg)  # reads only the tensors it needs
    student.model.layers.requires_grad_(True)
    student.model.norm.requires_grad_(True)
    return student


def trainable(model: Transformer) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]  # fixed order: optimizer state maps to it


def distill_loss(student_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(p_target || q_student) in nats per position; both [B, T, V] float32."""
    log_q = F.log_softmax(student_logits.flatten(0, 1), dim=-1)  # [B*T, V]
    log_p = F.log_softmax(target_logits.flatten(0, 1), dim=-1)
    return F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")


def _chunks(windows: torch.Tensor, size: int = 4) -> Iterator[torch.Tensor]:
    for i in range(0, len(windows), size):  # bounds the [chunk, T, V] logits in memory
        yield windows[i:i + size]


def argmax_tokens(model: Transformer, windows: torch.Tensor) -> torch.Tensor:
    """[W, T] -> each position's argmax next token [W, T] (on the CPU)."""
    with torch.no_grad():
        return torch.cat([window_logits(model, w.to(model.device)).argmax(-1).cpu() for w in _chunks(windows)])


def agreement(student: Transformer, windows: torch.Tensor, target_top1: torch.Tensor) -> float:
    """Top-1 agreement with the target (its argmax [W, T] precomputed once) on held-out windows."""
    return (argmax_tokens(student, windows) == target_top1).float().mean().item()  # host sync


def held_out_metrics(student: Transformer, teacher: Transformer, windows: torch.Tensor) -> dict:
    """agreement (greedy acceptance), accept_rate = E[sum_x min(p, q)] (acceptance at
    temperature 1) and KL (nats/token), on held-out windows [W, T]."""
    agree = accept = kl = 0.0
    with torch.no_grad():
        for w in _chunks(windows):
            w = w.to(student.device)
            p_logits, q_logits = window_logits(teacher, w), window_logits(student, w)  # [b, T, V]
            agree += (p_logits.argmax(-1) == q_logits.argmax(-1)).sum().item()
            accept += torch.minimum(p_logits.softmax(-1), q_logits.softmax(-1)).sum().item()
            kl += distill_loss(q_logits, p_logits).item() * w.numel()
    n = windows.numel()
    return {"agreement": round(agree / n, 4), "accept_rate": round(accept / n, 4), "kl": round(kl / n, 4)}
