"""Cheap lower levels: weight-only quantized copies of a model, and a drafter head pruned to the
tokens it can usefully propose. Both are transforms of a loaded (plain or fused) model that return
a *separate* module for a lower level; the full target always keeps its own weights, so the output
stays exact (a lower level only proposes; the acceptance rule and its residual correct any
proposal distribution, including one that is zero on most of the vocabulary).

    same   the level runs on the model's own weights (no copy)
    int8   per-output-row symmetric int8 (1 byte per weight + one scale per row)
    int4   asymmetric 4-bit in groups of INT4_GROUP input columns (0.5 byte per weight + a bf16
           scale and zero per group) for the decoder layers; the head int4 too, with exact logits for
           its best candidates of each row (RescoredHead), or int8 where there are no dense rows to
           rescore with (HEAD_KIND)

On a CPU with avx512_vnni or AVX2 both run runtime/csrc/quant_cpu.cpp (activations quantized to
int8 per 32 columns on the fly, exact int8 dot products; at the memory floor for one row); elsewhere torch's
kernels aten._weight_int8pack_mm (CPU/CUDA) and aten._weight_int4pack_mm_for_cpu, activations in
the model's dtype. The lower levels only propose, so the activation rounding cannot change the
output; tests/test_quant_kernels.py bounds it.

Every nn.Linear of the decoder layers and the head is replaced; embeddings and norms are shared
with the source model (not copied). A pass reads weight_bytes(model) bytes of weights: the figure
stats.levels.*.weight_bytes reports, so users see what quantization buys.
"""
from __future__ import annotations

import copy
import functools

import torch
import torch.nn as nn

from triforce.runtime import native
from triforce.runtime.config import WEIGHT_KINDS
from triforce.runtime.errors import UserError
from triforce.runtime.ops import Linear, PackedLinear, dense_weight, one_allocation

INT4_GROUP = 32                           # input columns sharing one int4 scale and zero
GROUP, BLOCK = 32, 16                     # native layout: columns per group, output rows per block
NATIVE_DTYPES = (torch.bfloat16, torch.float32)   # activations the native kernels take


@functools.cache
def _native_kernels():
    """runtime/csrc/quant_cpu.cpp when it built with its vector kernels (avx512_vnni, or AVX2), else
    None (cached: forward asks on every call)."""
    module = native.quant_cpu()
    return module if module is not None and module.has_kernels() else None


def native_kernels_run(model: nn.Module) -> bool:
    """Whether `model`'s quantized copies would run the native kernels (its device a CPU with
    them, its dtype one they take): where `auto` lower levels are int4 (RunConfig.lower_levels)."""
    p = next(model.parameters())
    return p.device.type == "cpu" and p.dtype in NATIVE_DTYPES and _native_kernels() is not None


def _pad(w: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """w [O, K] fp32 zero-padded to [rows, cols]."""
    out = w.new_zeros(rows, cols)
    out[:w.shape[0], :w.shape[1]] = w
    return out


def _quads(codes: torch.Tensor) -> torch.Tensor:
    """codes [O', K'] (O' % 16 == 0, K' % 32 == 0) -> [O'/16, K'/32, 8, 16, 4]: per block of 16 rows
    and group of 32 columns, 8 quads of 4 columns x 16 rows, the operand order of one vpdpbusd."""
    rows, cols = codes.shape
    return codes.view(rows // BLOCK, BLOCK, cols // GROUP, 8, 4).permute(0, 2, 3, 1, 4)


def _unquads(quads: torch.Tensor) -> torch.Tensor:
    """Inverse of _quads: [B, G, 8, 16, 4] -> [B*16, G*32]."""
    blocks, groups = quads.shape[:2]
    return quads.permute(0, 3, 1, 2, 4).reshape(blocks * BLOCK, groups * GROUP)


def quantize_rows_reference(x: torch.Tensor) -> torch.Tensor:
    """x [N, K] as the native kernels see it: each row quantized per group of 32 columns to int8
    with scale max|x|/127 (round half to even), returned dequantized in fp32 (the torch twin of
    quant_cpu.cpp's quantize_rows, for tests)."""
    n, k = x.shape
    cols = -(-k // GROUP) * GROUP
    g = _pad(x.float(), n, cols).view(n, cols // GROUP, GROUP)                     # [N, G, 32]
    amax = g.abs().amax(-1, keepdim=True)                                         # [N, G, 1]
    scale = amax / 127
    inv = torch.where(amax > 0, torch.full_like(amax, 127) / amax, torch.zeros_like(amax))  # not 127 / amax:
    # torch computes a scalar over a tensor as reciprocal * 127, one more rounding than the kernel
    return (torch.round(g * inv).clamp(-127, 127) * scale).view(n, cols)[:, :k]


def int8_codes(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> (q [out, in] fp32 codes in -127..127, scale [out] fp32): one scale per row."""
    w = dense.float()
    scale = (w.abs().amax(dim=1) / 127).clamp_min(1e-12)                         # [out]
    return torch.round(w / scale[:, None]).clamp(-127, 127), scale


def int8_packed_reference(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [out, in] -> Int8Linear's native (packed [rows/16, cols/32, 512] uint8, scales [rows] fp32),
    in torch: the twin of quant_cpu.cpp's quantize_int8 (tests)."""
    q, scale = int8_codes(dense)
    rows, cols = -(-dense.shape[0] // BLOCK) * BLOCK, -(-dense.shape[1] // GROUP) * GROUP
    u8 = (_pad(q, rows, cols) + 128).to(torch.uint8)                             # pad: q = 0, stored 128
    return (_quads(u8).reshape(rows // BLOCK, cols // GROUP, 8 * BLOCK * 4).contiguous(),
            _pad(scale[:, None], rows, 1)[:, 0].contiguous())


def int4_codes(dense: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [out, in] -> (q [rows, cols] int32 in 0..15, scale and low [rows, G] fp32), rows and cols
    rounded up to 16 and INT4_GROUP (zero-padded): per group, w ~ low + q * scale."""
    out, inp = dense.shape
    rows, cols = -(-out // 16) * 16, -(-inp // INT4_GROUP) * INT4_GROUP   # both layouts: tiles of 16 rows
    w = _pad(dense.float(), rows, cols).view(rows, cols // INT4_GROUP, INT4_GROUP)  # [rows, G, g]
    low, high = w.amin(-1), w.amax(-1)                                           # [rows, G]
    scale = ((high - low) / 15).clamp_min(1e-12)
    q = torch.round((w - low[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).view(rows, cols)
    return q, scale, low


def int4_packed_reference(dense: torch.Tensor) -> torch.Tensor:
    """w [out, in] -> Int4Linear's native packed [rows/16, cols/32, 320] uint8 in torch: the twin of
    quant_cpu.cpp's quantize_int4 (tests)."""
    q, scale, low = int4_codes(dense)
    rows, cols = q.shape
    quads = _quads(q.to(torch.uint8))                                            # [B, G, 8, 16, 4]
    nibbles = (quads[:, :, :4] | (quads[:, :, 4:] << 4)).reshape(rows // BLOCK, cols // GROUP, 256)
    sz = torch.stack([scale, low + 8 * scale]).to(torch.bfloat16)                # [2, rows, G]
    sz = sz.view(2, rows // BLOCK, BLOCK, cols // GROUP).permute(1, 3, 0, 2)      # [B, G, 2, 16]
    sz = sz.contiguous().view(torch.uint8).reshape(rows // BLOCK, cols // GROUP, 64)
    return torch.cat([nibbles, sz], -1).contiguous()


class _QuantLinear(nn.Module):
    """Base of the quantized linears: `weight` is an empty marker in the compute dtype and on the
    device (as parallel._HiddenOut does), so Transformer.device/.dtype keep working on a head.

    Two layouts, chosen once at construction (never both: weight_bytes counts what one pass reads):
    `native` (runtime/csrc/quant_cpu.cpp's packed blocks) on a CPU where that module built with
    avx512_vnni or AVX2, else torch's (its weight-only kernels, CPU or CUDA). The native kernels run every
    call, however many rows: measured (python -m triforce.runtime.bench.kernels quant) they beat torch's
    kernels 1.4-2x at N = 1..16 and 2-2.4x at N = 64 and 256 (prefill chunks), and a prefill row
    then equals the decode row bitwise. Neither path has a backward (torch's kernels have none)."""

    def __init__(self, linear: nn.Module, native: bool | None = None):
        super().__init__()
        w = linear.weight    # dtype and device only (a PackedLinear's is its marker: no unpacking here)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", torch.empty(0, dtype=w.dtype, device=w.device), persistent=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)
        can = w.device.type == "cpu" and _native_kernels() is not None
        if native and not can:
            raise UserError(f"the native quantized kernels are not available here (device {w.device}, "
                            f"built: {_native_kernels() is not None}); leave native=None")
        self.native = can if native is None else native   # None: native where it runs; False: torch's layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.native:     # x [..., K] bf16/fp32 -> [..., out], one call (reshape, bias in the kernel)
            return self.native_matmul(x if x.dtype in NATIVE_DTYPES else x.to(self.weight.dtype))
        flat = x.reshape(-1, self.in_features).contiguous()                      # [N, K]
        y = self.matmul(flat.to(self.weight.dtype)).view(*x.shape[:-1], self.out_features)  # [..., out]
        return y if self.bias is None else y + self.bias


    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., in] -> fp32 [..., out]: what forward computes, in plain torch from dequantized()
        (the twin of the native kernels: with the native layout each x row is quantized per group
        of 32 columns, and int4's zero term multiplies the exact x)."""
        flat = x.reshape(-1, self.in_features).float()                            # [N, K]
        w, zero = self.dequantized(), self.zero_term()                            # [out, in] each
        y = flat @ w.T if not self.native else quantize_rows_reference(flat) @ (w - zero).T + flat @ zero.T
        y = y if self.bias is None else y + self.bias.float()
        return y.view(*x.shape[:-1], self.out_features)

    def zero_term(self) -> torch.Tensor:
        """The part of dequantized() [out, in] that the native kernel multiplies by the exact x."""
        return torch.zeros(self.out_features, self.in_features)


class Int8Linear(_QuantLinear):
    """y = x @ (q * scale)^T, q int8 [out, in], one scale per output row; an input width that is
    not a multiple of 32 is padded with zero columns (torch's kernel crashes on K = 100, say).
    torch layout: qweight [out, in'] int8, scales [out] in the compute dtype (_weight_int8pack_mm).
    native layout: packed [out/16, in/32, 512] uint8 (q + 128, vpdpbusd order), scales [out/16*16] fp32."""

    def __init__(self, linear: nn.Linear, native: bool | None = None):
        super().__init__(linear, native)
        dense = dense_weight(linear).detach()                                    # [out, in]
        if self.native:   # quant_cpu.cpp's quantize_int8: int8_packed_reference's bits, ~12x faster
            packed, scales = _native_kernels().quantize_int8(dense)
            self.register_buffer("packed", packed)                               # [rows/16, cols/32, 512]
            self.register_buffer("scales", scales)                               # [rows] fp32
        else:
            q, scale = int8_codes(dense)
            cols = -(-self.in_features // GROUP) * GROUP
            self.register_buffer("qweight", _pad(q, self.out_features, cols).to(torch.int8))  # [out, in']
            self.register_buffer("scales", scale.to(self.weight.dtype))  # [out], the compute dtype

    def codes(self) -> torch.Tensor:
        """q [out, in'] int8 (in' = in rounded up to 32, zero columns past in)."""
        if not self.native:
            return self.qweight
        blocks, groups = self.packed.shape[:2]
        u8 = _unquads(self.packed.view(blocks, groups, 8, BLOCK, 4))
        return (u8.to(torch.int16) - 128).to(torch.int8)[:self.out_features].contiguous()

    def native_matmul(self, x: torch.Tensor) -> torch.Tensor:
        scales = self._buffers["scales"]   # _buffers, not Module.__getattr__: ~0.5 us a lookup, 120 linears a pass
        if scales.dtype != torch.float32:  # after a .to(dtype)
            scales = scales.float()
        return _native_kernels().int8_linear(x, self._buffers["packed"], scales, self._parameters.get("bias"),
                                             self.out_features)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        if self.qweight.shape[1] != self.in_features:
            x = torch.nn.functional.pad(x, (0, self.qweight.shape[1] - self.in_features))  # zero columns: nothing added
        # .to: a copy computing in another dtype than its source's keeps the source's scales (convert_floats)
        return torch.ops.aten._weight_int8pack_mm(x, self.qweight, self.scales.to(x.dtype))

    def dequantized(self) -> torch.Tensor:
        q = self.codes()[:, :self.in_features]
        return q.float() * self.scales[:self.out_features].float()[:, None]      # [out, in]


class Int4Linear(_QuantLinear):
    """Per group of INT4_GROUP input columns: w = (q - 8) * scale + zero, q in 0..15, scale and zero
    from the group's min and max (zero is the value q = 8 stands for, as torch's kernel wants it;
    an input width that is not a multiple of the group is padded with zero columns).
    torch layout: qweight from _convert_weight_to_int4pack_for_cpu, scales_and_zeros [G, rows, 2].
    native layout: packed [out/16, in/32, 320] uint8: per block of 16 rows and group, 256 bytes of
    nibbles in vpdpbusd order, then bf16 scale[16] and zero[16]."""

    def __init__(self, linear: nn.Linear, native: bool | None = None):
        super().__init__(linear, native)
        dense = dense_weight(linear)
        if dense.device.type != "cpu":
            raise UserError(f"int4 weights run on the CPU kernel only (the model is on {dense.device}); "
                            "use int8 there")
        if self.native:   # quant_cpu.cpp's quantize_int4: int4_packed_reference's bits, ~9x faster
            self.register_buffer("packed", _native_kernels().quantize_int4(dense.detach()))   # [rows/16, cols/32, 320]
        else:
            q, scale, low = int4_codes(dense.detach())                           # [rows, cols] int32, [rows, G] x 2
            self.register_buffer("qweight", torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1))  # [rows, in/2] uint8
            zero = low + 8 * scale
            self.register_buffer("scales_and_zeros",                             # [G, rows, 2]
                                 torch.stack([scale, zero], -1).transpose(0, 1).contiguous().to(dense.dtype))
            self._codes = q   # kept for dequantized() (tests); dropped by drop_codes()

    def native_matmul(self, x: torch.Tensor) -> torch.Tensor:
        return _native_kernels().int4_linear(x, self._buffers["packed"], self._parameters.get("bias"), self.out_features)

    def native_parts(self):
        """(q [rows, cols] int32, scale [rows, G] fp32, zero [rows, G] fp32) from the native layout."""
        blocks, groups = self.packed.shape[:2]
        nibbles = self.packed[..., :256].reshape(blocks, groups, 4, BLOCK, 4)
        q = _unquads(torch.cat([nibbles & 15, nibbles >> 4], 2)).to(torch.int32)
        sz = self.packed[..., 256:].contiguous().view(torch.bfloat16).view(blocks, groups, 2, BLOCK).float()
        sz = sz.permute(2, 0, 3, 1).reshape(2, blocks * BLOCK, groups)         # [2, rows, G]
        return q, sz[0], sz[1]

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        cols = -(-self.in_features // INT4_GROUP) * INT4_GROUP
        if cols != self.in_features:
            x = torch.nn.functional.pad(x, (0, cols - self.in_features))       # zero columns: nothing added
        y = torch.ops.aten._weight_int4pack_mm_for_cpu(x, self.qweight, INT4_GROUP, self.scales_and_zeros.to(x.dtype))
        return y if y.shape[-1] == self.out_features else y[:, :self.out_features].contiguous()

    def zero_term(self) -> torch.Tensor:
        if not self.native:
            return super().zero_term()
        zero = self.native_parts()[2]                                            # [rows, G]
        return zero.repeat_interleave(INT4_GROUP, 1)[:self.out_features, :self.in_features]

    def dequantized(self) -> torch.Tensor:
        if self.native:
            q, scale, zero = self.native_parts()
        else:
            q, (scale, zero) = self._codes, self.scales_and_zeros.float().transpose(0, 1).unbind(-1)  # [rows, G] each
        w = (q.float().view(len(q), -1, INT4_GROUP) - 8) * scale[..., None] + zero[..., None]   # [rows, G, g]
        return w.reshape(len(w), -1)[:self.out_features, :self.in_features]      # [out, in]


QUANTIZED = {"int8": Int8Linear, "int4": Int4Linear}
# The head's rounding moves the logits directly: on the essays at 7K (`triforce bench --suite lower`,
# docs/BENCHMARKS.md round 6) a plain int4 head cut the middle level's expected acceptance at
# T = 0.6 from int8's 0.937 to 0.891 and its greedy agreement from 0.988 to 0.973, while int4
# decoder layers under an int8 head lost nothing (0.941, 0.988). So an int4 head is a
# RescoredHead where the model's dense head rows are at hand (rescore_rows), else int8.
HEAD_KIND = {"same": "same", "int8": "int8", "int4": "int4"}
RESCORED = 32   # candidates per row a RescoredHead gives exact logits (16 and 64 measured alike, round 47)


class RescoredHead(nn.Module):
    """An int4 head whose RESCORED largest logits in each row are replaced by the exact ones, x . w
    summed in fp32 and rounded to the dtype of the rows `dense` [V, E] of the head it was quantized
    from, as that dense head's logits are (bf16 logits tie where fp32 ones would not, and argmax
    takes the first of a tie). `dense` is shared, not copied (a tied head's: the copy's embedding);
    K rows a pass, not counted in weight_bytes. The int4 head reads 0.625 bytes
    a weight against int8's 1 (SmolLM2-135M: 17.7 MB against 28.3), and its candidates hold the
    argmax and nearly all of the mass, so the middle level keeps an int8 head's acceptance (7K greedy
    agreement 0.988 either way, T = 0.6 expected acceptance 0.951 against 0.954; a plain int4 head
    0.981 and 0.913: docs/BENCHMARKS.md round 47). Lossless as any lower level: it only proposes."""

    def __init__(self, head: nn.Module, dense: torch.Tensor):
        super().__init__()
        self.approx = Int4Linear(head)
        self.dense = dense.detach()             # [V, E], shared: a plain tensor, not a parameter (weight_bytes)
        self.bias = None

    @property
    def weight(self) -> torch.Tensor:
        """The int4 head's dtype and device marker (Transformer.dtype and .device read the head's)."""
        return self.approx.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.approx(x).float()                                          # [..., V]
        flat = logits.view(-1, logits.shape[-1])                                  # [N, V]
        rows = x.reshape(-1, x.shape[-1]).to(self.dense.dtype)                    # [N, E]
        k, kernel = min(RESCORED, flat.shape[-1]), native.quant_cpu()
        if kernel is not None and x.device.type == "cpu":
            kernel.rescore_top(flat, rows, self.dense, k)
            return logits
        top = flat.topk(k, dim=-1).indices                                       # [N, K]
        exact = torch.einsum("ne,nke->nk", rows.float(), self.dense[top].float()).to(rows.dtype)   # [N, K], as a dense head rounds
        flat.scatter_(-1, top, exact)
        return logits


def rescore_rows(model: nn.Module) -> torch.Tensor | None:
    """The dense rows a RescoredHead of `model`'s head reads: a tied head's embedding, an untied plain
    head's weight; None where there are none to share (an untied packed head: a dense copy)."""
    head = model.lm_head
    if getattr(model.cfg, "tie_word_embeddings", False):
        return model.model.embed_tokens.weight
    return head.weight if isinstance(head, nn.Linear) and head.bias is None else None


class PrunedHead(nn.Module):
    """The head restricted to `kept` token ids: logits [..., N] computed, scattered into a
    [..., V] row of -inf (probability zero elsewhere). The acceptance rule stays exact: a target
    token outside the kept set is still produced, through the residual max(0, p - q) = p there."""

    def __init__(self, head: nn.Module, kept: torch.Tensor, vocab_size: int):
        super().__init__()
        kept = kept.to(head.weight.device)
        self.inner = Linear(head.in_features, len(kept), bias=head.bias is not None, device="meta")
        self.inner.weight = nn.Parameter(dense_weight(head).detach()[kept].clone(), requires_grad=False)  # [N, E]
        if isinstance(head, PackedLinear):   # a packed model's pruned head is packed too
            self.inner = PackedLinear(self.inner)
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


def lower_level_copy(model: nn.Module, weights: str = "same", kept: torch.Tensor | None = None,
                     head: str | None = None, dtype: torch.dtype | None = None) -> nn.Module:
    """A model for a lower level: `model` itself when nothing changes, else a copy whose linear
    weights are quantized (`weights`) and/or whose head keeps only the `kept` ids. The head is
    quantized as HEAD_KIND[weights] says unless `head` names a kind (the `lower` bench suite
    compares them). Embeddings, norms and RoPE settings are shared with `model` (the copy holds
    references, not copies), unless `dtype` asks for another compute dtype for a quantized copy:
    then the copy's remaining float tensors (embedding, norms) are converted copies."""
    for kind in (weights, head or weights):
        if kind not in WEIGHT_KINDS:
            raise UserError(f"weights {kind!r} is not one of {', '.join(WEIGHT_KINDS)}")
    if weights == "same" and kept is None and head in (None, "same"):
        return model
    shared = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    out = copy.deepcopy(model, memo=shared)       # new modules, same tensors
    if kept is not None:
        out.lm_head = PrunedHead(out.lm_head, kept, model.cfg.vocab_size)
    head = head or HEAD_KIND[weights]
    label = weights + (f"+head-{head}" if head != HEAD_KIND[weights] else "") + (f"+vocab{len(kept)}" if kept is not None else "")
    dense = rescore_rows(model) if head == "int4" and kept is None else None
    if head == "int4" and dense is None:   # no exact rows to rescore with: an int8 head (HEAD_KIND's note)
        head = "int8"
    in_head = set(map(id, out.lm_head.modules())) | {id(out.lm_head)}
    quantized = []
    for parent in [*out.model.layers.modules(), *out.lm_head.modules(), out]:
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.Linear, PackedLinear)):   # nn.Linear, ops.Linear and ops.PackedLinear
                kind = head if id(child) in in_head else weights
                if kind == "int4" and id(child) in in_head:
                    setattr(parent, name, RescoredHead(child, dense))
                    quantized.append(getattr(parent, name).approx)
                elif kind != "same":
                    quantized.append(QUANTIZED[kind](child))
                    setattr(parent, name, quantized[-1])
    one_allocation(quantized)                      # its own blocks only: those it shares stay where they are
    for m in out.modules():
        if isinstance(m, Int4Linear):
            m._codes = None
    if dtype is not None and dtype != model.dtype:
        if weights == "same":
            raise ValueError("a compute dtype of its own is for quantized copies (dense weights would be copied)")
        convert_floats(out, dtype)
    if isinstance(out.lm_head, RescoredHead) and model.cfg.tie_word_embeddings:
        out.lm_head.dense = out.model.embed_tokens.weight.detach()   # the copy's own (maybe converted) embedding
    out.weights = label
    return out


def convert_floats(model: nn.Module, dtype: torch.dtype) -> None:
    """Replaces, in `model`'s own modules only, every float parameter and buffer by a converted
    copy (the tensors it shares with another model stay as they are); a quantized linear keeps its
    scales and converts its bias and its dtype marker."""
    for m in model.modules():
        quantized = isinstance(m, _QuantLinear)
        for name, t in list(m._parameters.items()):
            if t is not None and t.is_floating_point() and t.dtype != dtype and (not quantized or name == "bias"):
                m._parameters[name] = nn.Parameter(t.detach().to(dtype), requires_grad=False)
        for name, t in list(m._buffers.items()):
            if t is not None and t.is_floating_point() and t.dtype != dtype and (not quantized or name == "weight"):
                m._buffers[name] = t.to(dtype)


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
