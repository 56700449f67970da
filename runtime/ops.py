"""The per-layer ops of a decode pass, native on CPU where that pays, each with its torch twin.

    linear    x [..., K] . w [O, K]^T (+ bias)   native for few bf16 rows (N = B*T <= MAX_ROWS)
    PackedLinear  the same with w packed at load   native for any bf16 or fp32 rows (the engine's models)
    rms_norm  w * x / rms(x), fp32 statistics     native for bf16/fp32
    rope      x * cos + rotate_half(x) * sin      native for bf16/fp32, can write into a cache slice
    silu_mul  silu(gate) * up                     native for bf16/fp32

Why (runtime/csrc/layer_cpu.cpp has the details): a decode pass multiplies a few rows by every
weight matrix, so it is bound by reading the weights, and torch's bf16 GEMM reads them at a
fraction of the bandwidth for so few rows; and at T = 1 a layer's ~50 small torch ops (a few us
each) cost as much as its weights (model.decoder_plan then runs a whole pass's layers in one
native call). Everything else runs the torch twin: an unpacked Linear's prefill chunks (many
rows: torch's GEMM is compute-efficient), CUDA, fp16, autograd (training: the kernels have no
backward), and machines where the kernels did not build. tests/test_ops.py checks each pair.

Linear keeps nn.Linear's parameters and state-dict names, so checkpoints load, tensor
parallelism slices and quantization copies it as any nn.Linear. The engine then packs its
target and drafter (pack_linears): the packed layout streams the weights at the memory's speed
for 1..16 rows (1.3-2x the unpacked kernel) and needs no second copy. Linear stays for the
weights that must keep the checkpoint's layout: those a Ray shard maps from the host tier, and
those streamed layer by layer (offload/weights.py).
"""
from __future__ import annotations

import functools

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
    if rows > FP32_ROWS and x.dtype == weight.dtype == torch.bfloat16 and x.device.type == "cpu" and not cpu_bf16():
        bias32 = None if bias is None else bias.float()
        return F.linear(x.float(), weight.float(), bias32).to(torch.bfloat16)
    return F.linear(x, weight, bias)


# A CPU without bf16 instructions (AVX2; oneDNN says so) multiplies bf16 matrices at ~1 GFLOP/s: a
# Zen 3, [N, 576] x [576, 1536], 2 threads: N = 1024 115 ms in bf16, 15 ms through fp32 (weights
# converted each call); N = 8 0.91 against 0.62 ms; N = 4 0.47 against 0.51 (round 34). So more
# than FP32_ROWS bf16 rows go through fp32 there.
FP32_ROWS = 4


@functools.cache
def cpu_bf16() -> bool:
    """Whether torch's CPU GEMM has bf16 instructions here (avx512_bf16/AMX, or oneDNN's AVX-512 path)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):   # a torch without oneDNN: assume AVX-512-class
        return True


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


BLOCK = 16   # output rows per packed block: the 16 fp32 lanes of one zmm


PACKED_DTYPES = (torch.bfloat16, torch.float32)   # weights the packed kernel takes


def pack_unit(dtype: torch.dtype) -> int:
    """Columns per 4-byte unit of the packed layout: bf16 2 (column pairs), fp32 1."""
    return 4 // dtype.itemsize


def pack(weight: torch.Tensor) -> torch.Tensor:
    """w [O, K] bf16 or fp32 -> packed [ceil(O/16), K/u, 16, u] with u = 4 bytes / element size
    (bf16: 2, K even; fp32: 1): per block of 16 output rows, one 64-byte vector per 4-byte unit of
    columns (runtime/csrc/layer_cpu.cpp linear_packed); rows past O are zero."""
    O, K = weight.shape
    blocks, unit = -(-O // BLOCK), pack_unit(weight.dtype)
    padded = weight.contiguous()
    if O % BLOCK:
        padded = weight.new_zeros(blocks * BLOCK, K)
        padded[:O] = weight
    # bf16 pairs moved as 4-byte units: 0.31 -> 0.05 s for SmolLM2's 121 linears (round 33)
    units = padded.view(torch.int32) if unit == 2 else padded
    return units.view(blocks, BLOCK, K // unit).transpose(1, 2).contiguous().view(weight.dtype).view(blocks, K // unit, BLOCK, unit)


def unpack(packed: torch.Tensor, out_features: int) -> torch.Tensor:
    """The inverse of pack: packed [B, K/u, 16, u] -> w [O, K]."""
    blocks, units, _, unit = packed.shape
    whole = packed.view(torch.int32) if unit == 2 else packed   # bf16 pairs moved as 4-byte units: 0.21 -> 0.05 s for the target's 120 linears
    return whole.transpose(1, 2).reshape(blocks * BLOCK, units).contiguous().view(packed.dtype)[:out_features]


def packable(linear: nn.Module) -> bool:
    """Whether `linear` can run on the packed kernel: a dense bf16 or fp32 CPU nn.Linear (bf16:
    an even input width), on a build with the packed kernel (AVX-512 with avx512_bf16, or AVX2 + FMA)."""
    if not isinstance(linear, nn.Linear) or linear.weight.dtype not in PACKED_DTYPES or linear.weight.device.type != "cpu":
        return False
    kernel = native.layer_cpu()
    return linear.in_features % pack_unit(linear.weight.dtype) == 0 and kernel is not None and kernel.has_packed()


class PackedLinear(nn.Module):
    """A bf16 or fp32 linear whose weight lives only in the packed layout (pack): every call,
    whatever the row count, is one native call that streams the weights once (decode and verify
    passes run at the memory floor; bf16 prefill chunks at 650-850 GFLOP/s, within 0-20% of
    torch's GEMM here), and a prefill row equals the decode row bitwise (AVX-512; on AVX2 prefill
    chunks take torch's fp32 GEMM). `weight` is an empty marker in the dtype and on the
    device (as the quantized linears have), so Transformer.device/.dtype work on a packed head;
    dense() gives the [O, K] matrix back (quantized copies of a packed model are made from it).
    No backward: inference only (distillation trains plain modules)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight.detach()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("packed", pack(w))                                      # [B, K/u, 16, u]
        self.register_buffer("weight", w.new_empty(0), persistent=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features)                                       # [N, K]
        kernel = native.layer_cpu()
        if flat.shape[0] > MAX_ROWS and not kernel.has_avx512_bf16():
            # AVX2: a prefill chunk runs faster on torch's fp32 GEMM (its rows then round unlike
            # a decode row's): Zen 3, 1,024 rows, 1536x576 19.3 -> 14.6 ms, 576x1536 25.4 -> 16.1
            bias = None if self.bias is None else self.bias.float()
            return F.linear(flat.float(), self.dense().float(), bias).to(x.dtype).view(*x.shape[:-1], self.out_features)
        if flat.stride(-1) != 1:
            flat = flat.contiguous()
        y = kernel.linear_packed(flat, self.packed, self.bias, self.out_features)  # [N, O]
        return y.view(*x.shape[:-1], self.out_features)

    def dense(self) -> torch.Tensor:
        return unpack(self.packed, self.out_features)


def dense_weight(linear: nn.Module) -> torch.Tensor:
    """[O, K] weight of a Linear or PackedLinear."""
    return linear.dense() if isinstance(linear, PackedLinear) else linear.weight


def pack_linears(model: nn.Module) -> nn.Module:
    """Replaces every packable linear of `model` (in place) by a PackedLinear; a no-op off CPU, off
    bf16 and fp32, or where the kernel did not build. A tied head gets its own packed copy (the
    embedding stays a lookup table): for SmolLM2-135M, 56 MB more in bf16, 113 MB in fp32. The
    packed weights then share one allocation (one_allocation)."""
    packed = []
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if packable(child):
                packed.append(PackedLinear(child))
                setattr(parent, name, packed[-1])
    one_allocation(packed)
    return model


PAGE = 4096   # bytes; each block of one_allocation starts on a page (64-byte vector loads stay aligned)


def one_allocation(modules: list[nn.Module], name: str = "packed") -> None:
    """Moves each module's CPU buffer `name` (where it has one) into a view of one new allocation,
    byte for byte, so that a pass's weights stream from 2 MB pages: torch puts blocks of 2 MB or
    more on transparent huge pages (runtime/allocator.py), and most of a small model's blocks are
    under that (SmolLM2-135M: qkv, o and down in bf16, every int4 block). 120 one-row linears of its
    shapes, one process, separate blocks against one allocation (docs/BENCHMARKS.md, round 40):
    packed bf16 1.04-1.07x faster, int4 0.99-1.10x. Each old buffer is freed as its bytes move."""
    owners = [m for m in modules
              if isinstance(m._buffers.get(name), torch.Tensor) and m._buffers[name].device.type == "cpu"]
    if len(owners) < 2:
        return
    sizes = [m._buffers[name].numel() * m._buffers[name].element_size() for m in owners]
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + -(-size // PAGE) * PAGE)
    block = torch.empty(starts[-1] + PAGE, dtype=torch.uint8)                     # [bytes], one allocation
    base = -block.data_ptr() % PAGE                                               # its first page boundary
    for m, start, size in zip(owners, starts, sizes):
        old = m._buffers[name]
        view = block[base + start:base + start + size].view(old.dtype).view(old.shape)
        m._buffers[name] = view.copy_(old)
