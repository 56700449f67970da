"""Cheap lower levels: weight-only quantized copies of a model, and a drafter head pruned to the
tokens it can usefully propose. Both are transforms of a loaded (plain or fused) model that return
a *separate* module for a lower level; the full target always keeps its own weights, so the output
stays exact (a lower level only proposes; the acceptance rule and its residual correct any
proposal distribution, including one that is zero on most of the vocabulary).

    same   the level runs on the model's own weights (no copy)
    int8   per-output-row symmetric int8; torch's CPU/CUDA kernel aten._weight_int8pack_mm
           (activations stay in the model's dtype; 1 byte per weight + one scale per row)
    int4   asymmetric 4-bit in groups of INT4_GROUP input columns; aten._weight_int4pack_mm_for_cpu
           on CPU (0.5 byte per weight + a scale and a zero per group)

Every nn.Linear of the decoder layers and the head is replaced; embeddings and norms are shared
with the source model (not copied). A pass reads weight_bytes(model) bytes of weights: the figure
stats.levels.*.weight_bytes reports, so users see what quantization buys.
"""
from __future__ import annotations

import copy

import torch
import torch.nn as nn

from runtime.config import WEIGHT_KINDS
from runtime.errors import UserError
from runtime.ops import Linear

INT4_GROUP = 32                           # input columns sharing one int4 scale and zero


class _QuantLinear(nn.Module):
    """Base of the quantized linears: `weight` is an empty marker in the compute dtype and on the
    device (as parallel._HiddenOut does), so Transformer.device/.dtype keep working on a head."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        w = linear.weight
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", torch.empty(0, dtype=w.dtype, device=w.device), persistent=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).contiguous()                      # [N, K]
        y = self.matmul(flat.to(self.weight.dtype)).view(*x.shape[:-1], self.out_features)  # [..., out]
        return y if self.bias is None else y + self.bias


class Int8Linear(_QuantLinear):
    """y = x @ (q * scale)^T, q int8 [out, in], one scale per output row."""

    def __init__(self, linear: nn.Linear):
        super().__init__(linear)
        w = linear.weight.detach().float()                                       # [out, in]
        scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)                     # [out]
        self.register_buffer("qweight", torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scales", scale.to(linear.weight.dtype))           # [out], the compute dtype

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x, self.qweight, self.scales)

    def dequantized(self) -> torch.Tensor:
        return self.qweight.float() * self.scales.float()[:, None]               # [out, in]


class Int4Linear(_QuantLinear):
    """Per group of INT4_GROUP input columns: w = (q - 8) * scale + zero, q in 0..15, scale and zero
    from the group's min and max (zero is the value q = 8 stands for, as the kernel wants it)."""

    def __init__(self, linear: nn.Linear):
        super().__init__(linear)
        out, inp = linear.weight.shape
        if inp % INT4_GROUP:
            raise UserError(f"int4 weights need the input width {inp} to be a multiple of {INT4_GROUP}; "
                            "use int8 for this model")
        if linear.weight.device.type != "cpu":
            raise UserError(f"int4 weights run on the CPU kernel only (the model is on {linear.weight.device}); "
                            "use int8 there")
        rows = -(-out // 16) * 16          # the kernel packs rows in tiles of 16: zero rows pad the rest
        w = torch.zeros(rows, inp, device=linear.weight.device)
        w[:out] = linear.weight.detach().float()
        w = w.view(rows, inp // INT4_GROUP, INT4_GROUP)                          # [rows, G, g]
        low, high = w.amin(-1), w.amax(-1)                                       # [out, G]
        scale = ((high - low) / 15).clamp_min(1e-12)
        q = torch.round((w - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(rows, inp)
        self.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))  # [rows, in/2] uint8
        zero = low + 8 * scale
        self.register_buffer("scales_and_zeros",                                 # [G, rows, 2]
                             torch.stack([scale, zero], -1).transpose(0, 1).contiguous().to(linear.weight.dtype))
        self._codes = q   # kept for dequantized() (tests); dropped by drop_codes()

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.qweight, INT4_GROUP, self.scales_and_zeros)
        return y if y.shape[-1] == self.out_features else y[:, :self.out_features].contiguous()

    def dequantized(self) -> torch.Tensor:
        sz = self.scales_and_zeros.float().transpose(0, 1)                       # [rows, G, 2]
        q = self._codes.float().view(len(self._codes), -1, INT4_GROUP)           # [rows, G, g]
        w = ((q - 8) * sz[..., :1] + sz[..., 1:]).view(len(self._codes), self.in_features)
        return w[:self.out_features]                                             # [out, in]


QUANTIZED = {"int8": Int8Linear, "int4": Int4Linear}


class PrunedHead(nn.Module):
    """The head restricted to `kept` token ids: logits [..., N] computed, scattered into a
    [..., V] row of -inf (probability zero elsewhere). The acceptance rule stays exact: a target
    token outside the kept set is still produced, through the residual max(0, p - q) = p there."""

    def __init__(self, head: nn.Linear, kept: torch.Tensor, vocab_size: int):
        super().__init__()
        kept = kept.to(head.weight.device)
        self.inner = Linear(head.in_features, len(kept), bias=head.bias is not None, device="meta")
        self.inner.weight = nn.Parameter(head.weight.detach()[kept].clone(), requires_grad=False)  # [N, E]
        if head.bias is not None:
            self.inner.bias = nn.Parameter(head.bias.detach()[kept].clone(), requires_grad=False)
        self.register_buffer("kept", kept)                                      # [N] token ids
        self.register_buffer("weight", torch.empty(0, dtype=head.weight.dtype, device=head.weight.device),
                             persistent=False)                                  # marker, see _QuantLinear
        self.vocab_size = vocab_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        small = self.inner(x).float()                                           # [..., N]
        out = small.new_full((*small.shape[:-1], self.vocab_size), float("-inf"))  # [..., V]
        return out.index_copy_(-1, self.kept, small)


def lower_level_copy(model: nn.Module, weights: str = "same", kept: torch.Tensor | None = None) -> nn.Module:
    """A model for a lower level: `model` itself when nothing changes, else a copy whose linear
    weights are quantized (`weights`) and/or whose head keeps only the `kept` ids. Embeddings,
    norms and RoPE settings are shared with `model` (the copy holds references, not copies)."""
    if weights not in WEIGHT_KINDS:
        raise UserError(f"weights {weights!r} is not one of {', '.join(WEIGHT_KINDS)}")
    if weights == "same" and kept is None:
        return model
    shared = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    out = copy.deepcopy(model, memo=shared)       # new modules, same tensors
    if kept is not None:
        out.lm_head = PrunedHead(out.lm_head, kept, model.cfg.vocab_size)
    if weights != "same":
        for parent in [*out.model.layers.modules(), *out.lm_head.modules(), out]:
            for name, child in list(parent.named_children()):
                if isinstance(child, nn.Linear):   # nn.Linear and runtime.ops.Linear
                    setattr(parent, name, QUANTIZED[weights](child))
        for m in out.modules():
            if isinstance(m, Int4Linear):
                m._codes = None
    out.weights = weights + (f"+vocab{len(kept)}" if kept is not None else "")
    return out


def weight_bytes(model: nn.Module) -> int:
    """Bytes of weights one pass reads: decoder layers, final norm and head (the embedding is a
    lookup of T rows, not counted; a tied head is counted once, as the head)."""
    seen, total = set(), 0
    inner = getattr(model, "model", None)
    modules = [getattr(inner, "layers", None), getattr(inner, "norm", None), getattr(model, "lm_head", None)]
    for module in modules:
        if module is None:
            continue
        for t in [*module.parameters(), *module.buffers()]:
            if id(t) not in seen and t.dtype != torch.int64:   # int64: PrunedHead.kept ids, an index
                seen.add(id(t))
                total += t.numel() * t.element_size()
    return total
