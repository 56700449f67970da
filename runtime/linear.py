"""nn.Linear whose few-row CPU products (decode and verify passes) run on the native kernel.

A decode pass multiplies N = B*T <= MAX_ROWS rows by each weight matrix: it is bound by reading
the weights, and torch's bf16 GEMM reads them at a fraction of the memory bandwidth for so few
rows (runtime/csrc/linear_cpu.cpp says why and how the kernel does better). Everything else
(prefill chunks, fp32/fp16, CUDA, training with autograd, a CPU without avx512_bf16) runs
torch's F.linear, the pure-torch twin that tests/test_linear.py checks the kernel against.

The module keeps nn.Linear's parameters and state-dict names, so checkpoints load, tensor
parallelism slices and quantization copies it as any nn.Linear.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from runtime import native

MAX_ROWS = 16        # rows per call up to which the kernel beats torch's GEMM here (bench: runtime.bench.kernels)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [..., K] . weight [O, K]^T (+ bias [O]) -> [..., O], the kernel where it applies."""
    rows = x.numel() // x.shape[-1]
    if (rows <= MAX_ROWS and x.dtype == torch.bfloat16 and weight.dtype == torch.bfloat16
            and x.device.type == "cpu" and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        kernel = native.linear_cpu()
        if kernel is not None:
            flat = x.reshape(rows, x.shape[-1])                                   # [N, K]
            if flat.stride(-1) != 1:
                flat = flat.contiguous()
            return kernel.linear(flat, weight, bias).view(*x.shape[:-1], weight.shape[0])  # [..., O]
    return F.linear(x, weight, bias)


class Linear(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
