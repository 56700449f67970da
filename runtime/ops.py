"""The per-layer ops of a decode pass, native on CPU where that pays, each with its torch twin.

    linear    x [..., K] . w [O, K]^T (+ bias)   native for few bf16 rows (N = B*T <= MAX_ROWS)
    rms_norm  w * x / rms(x), fp32 statistics     native for bf16/fp32
    rope      x * cos + rotate_half(x) * sin      native for bf16/fp32, can write into a cache slice
    silu_mul  silu(gate) * up                     native for bf16/fp32

Why (runtime/csrc/layer_cpu.cpp has the details): a decode pass multiplies a few rows by every
weight matrix, so it is bound by reading the weights, and torch's bf16 GEMM reads them at a
fraction of the bandwidth for so few rows; and at T = 1 a layer's ~50 small torch ops (a few us
each) cost as much as its weights. Everything else runs the torch twin: prefill chunks (many
rows: torch's GEMM is compute-efficient), CUDA, fp16, autograd (training: the kernels have no
backward), and machines where the kernels did not build. tests/test_ops.py checks each pair.

Linear keeps nn.Linear's parameters and state-dict names, so checkpoints load, tensor
parallelism slices and quantization copies it as any nn.Linear.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from triforce.runtime import native

# Rows per call up to which the native linear beats torch's GEMM. Measured on the 2-core EPYC, the
# 121 matrices of a SmolLM2-135M pass, interleaved medians: N = 1: 7.7 against 15.6 ms, N = 8: 15.8
# against 18.3, N = 16: 19.8 against 23.3; from N = 24 torch's blocked GEMM is faster (15.3 vs 16.8).
MAX_ROWS = 16
GLUE_DTYPES = (torch.bfloat16, torch.float32)


def _kernels(x: torch.Tensor, *others: torch.Tensor):
    """The native module when x (and others) may take it: CPU, no autograd through them, built."""
    if x.device.type != "cpu" or (torch.is_grad_enabled() and any(t.requires_grad for t in (x, *others))):
        return None
    return native.layer_cpu()


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] . weight [O, K]^T (+ bias [O]) -> [..., O]."""
    rows = x.numel() // x.shape[-1]
    if rows <= MAX_ROWS and x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16:
        kernel = _kernels(x, weight)
        if kernel is not None and kernel.has_avx512_bf16():
            flat = x.reshape(rows, x.shape[-1])                                   # [N, K]
            if flat.stride(-1) != 1:
                flat = flat.contiguous()
            return kernel.linear(flat, weight, bias).view(*x.shape[:-1], weight.shape[0])  # [..., O]
    return F.linear(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x [..., E], weight [E] -> weight * x / sqrt(mean(x^2) + eps), normalized in fp32 and rounded
    to x's dtype before the weight multiplies it (as the checkpoints were trained, and transformers does)."""
    kernel = _kernels(x, weight) if x.dtype in GLUE_DTYPES and weight.dtype == x.dtype else None
    if kernel is not None:
        return kernel.rms_norm(x, weight, eps)
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """x [B, h, T, D], cos/sin [B, T, D] -> x * cos + rotate_half(x) * sin [B, h, T, D] (HF's
    rotate_half convention), written into `out` when given (a cache slice: no second copy)."""
    kernel = _kernels(x) if x.dtype in GLUE_DTYPES and cos.dtype == sin.dtype == x.dtype else None
    if kernel is not None and x.shape[-1] <= 512 and x.stride(-1) == 1 and cos.stride(-1) == sin.stride(-1) == 1:
        if out is None:
            out = torch.empty(x.shape, dtype=x.dtype)
        kernel.rope(x, cos, sin, out)
        return out
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin
    return rotated if out is None else out.copy_(rotated)


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gate, up [..., F] (e.g. the two halves of the fused gate_up output) -> silu(gate) * up [..., F]."""
    kernel = _kernels(gate, up) if gate.dtype in GLUE_DTYPES and up.dtype == gate.dtype else None
    if kernel is not None and gate.stride(-1) == up.stride(-1) == 1:
        return kernel.silu_mul(gate, up)
    return F.silu(gate) * up


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
