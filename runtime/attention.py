"""One attention signature, three backends: flash-attn's KV-cache kernel on CUDA when it is
installed; on CPU the native kernel (runtime/csrc/attention_cpu.cpp), or where it did not build
mask-free SDPA (prefix + causal square merged by log-sum-exp); elsewhere (CUDA without flash-attn)
SDPA with torch's bottom-right CausalBias, which it runs in its own flash kernel, no mask built.
attend_masked takes any visibility (a pass replayed from a CUDA graph: runtime/graphs.py), and
attend_reference is the pure-torch twin the native kernel is tested against.

Causality is bottom-right aligned: the T new queries are the last T of the S visible positions,
so query t sees keys [0, S - T + t]. This lets several new tokens (prefill chunks, speculative
verification) attend to a cache of any length, including the gathered retrieval cache.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from triforce.runtime import native


@functools.cache
def _flash_attn_with_kvcache():
    try:
        from flash_attn import flash_attn_with_kvcache  # optional GPU dependency
    except ImportError:
        return None
    return flash_attn_with_kvcache


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, D], k/v [B, Hkv, S, D] (S >= T) -> [B, T, H, D] (ready for o_proj)."""
    flash = _flash_attn_with_kvcache() if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) else None
    if flash is not None:
        return _attend_flash(flash, q, k, v)
    if torch.is_grad_enabled() and q.requires_grad:  # training (distillation): the kernels have no backward
        return _attend_sdpa(q, k, v)
    if q.device.type == "cpu":
        kernel = native.attention_cpu()
        if kernel is not None and (kernel.has_avx512_bf16() or _avx2_item(kernel, q, k)):
            return kernel.attend(q, k, v, q.shape[-1] ** -0.5)
        return _attend_sdpa_split(q, k, v)
    return _attend_sdpa_lower_right(q, k, v)


def _avx2_item(kernel, q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether an AVX2 build (no AVX-512 kernels) takes this call: decode and verify passes of bf16
    or fp32 (its scalar prefill and fp16 paths lose to torch's flash kernel: on a Zen 3, 8K keys, one
    layer, the scalar items took 2.7 ms at T = 1 and 18.4 at T = 8 against torch's 1.7 and 2.7)."""
    rows = q.shape[1] // k.shape[1] * q.shape[2]
    D = q.shape[-1]
    return kernel.has_avx2() and rows <= kernel.decode_rows and q.dtype in (torch.bfloat16, torch.float32) and D % 16 == 0 and D <= 256


def attend_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The pure-torch twin of the native kernel: SDPA with a materialized causal mask."""
    return _attend_sdpa(q, k, v)


def _attend_flash(flash, q, k, v):
    # flash-attn wants [B, S, Hkv, D]; a transposed view of our layout has unit stride in D,
    # which is all the kernel needs (no copy). GQA is native; causal is bottom-right aligned.
    B, H, T, D = q.shape
    seqlens = torch.full((B,), k.shape[2], dtype=torch.int32, device=q.device)
    out = flash(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), cache_seqlens=seqlens, causal=True)
    return out  # [B, T, H, D]


def causal_mask(T: int, S: int, device: torch.device) -> torch.Tensor:
    """Bottom-right aligned causal mask [T, S]: True where query t may attend key s."""
    return torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)


def _attend_sdpa(q, k, v):
    T, S = q.shape[2], k.shape[2]
    return attend_masked(q, k, v, None if T == 1 else causal_mask(T, S, q.device))


def attend_masked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor | None) -> torch.Tensor:
    """q [B, H, T, D], k/v [B, Hkv, S, D], visible [T, S] bool (query t may see key s; None: all)
    -> [B, T, H, D]. Any visibility, for a pass whose cache length is not a shape: a pass replayed
    from a CUDA graph attends to its whole buffer (runtime/graphs.py)."""
    # GQA without copying K/V: the G query heads that share a KV head are stacked along the
    # query axis, [B, H, T, D] -> [B, Hkv, G*T, D], so every KV head is read once.
    B, H, T, D = q.shape
    G = H // k.shape[1]
    q = q.reshape(B, k.shape[1], G * T, D)                 # heads h = kv * G + g (HF's repeat_kv order)
    mask = None if visible is None else visible.repeat(G, 1)           # [G*T, S]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)      # [B, Hkv, G*T, D]
    return out.reshape(B, H, T, D).transpose(1, 2)        # [B, T, H, D] (a GPU kernel may return other strides)


def _attend_sdpa_lower_right(q, k, v):
    # Every T on a GPU without flash-attn: the bottom-right causal mask as torch's CausalBias, which
    # SDPA runs in its flash kernel (bf16/fp16; split over the keys, no [T, S] mask) or its
    # memory-efficient one (fp32). A boolean mask sends SDPA to a kernel that splits the work over
    # queries only: on an H200 a 2-token pass over 120K keys took 4x a 1-token one (BENCHMARKS "GPU",
    # round 20; 1.0-1.1x this way, round 24). T = 1 too (all keys visible): plain SDPA's own choice
    # cost an `ar` pass 87.5 ms in the decode loop at 32K, where its key length grows each step,
    # against 30 ms at a fixed length (BENCHMARKS "GPU", round 24).
    from torch.nn.attention.bias import causal_lower_right
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, S), enable_gqa=Hkv != H)
    return out.transpose(1, 2)                             # [B, H, T, D] -> [B, T, H, D]


def _attend_sdpa_split(q, k, v):
    # Mask-free causal attention on CPU: the T queries see all of the prefix keys [0, S - T)
    # (no mask) and a causal square over the last T keys (is_causal, top-left = bottom-right
    # there); the two parts are merged by their log-sum-exp. Cost: the mask [G*T, S] of
    # _attend_sdpa (G*T*S bytes per layer) is never built.
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    sdpa = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    k_sq = k[:, :, S - T:].repeat_interleave(G, dim=1)     # [B, H, T, D] (T keys: a small copy)
    v_sq = v[:, :, S - T:].repeat_interleave(G, dim=1)
    out, lse = sdpa(q, k_sq, v_sq, 0.0, True)               # [B, H, T, D], [B, H, T]
    if S > T:
        qg = q.reshape(B, Hkv, G * T, D)                    # GQA: every prefix key read once
        out_p, lse_p = sdpa(qg, k[:, :, :S - T], v[:, :, :S - T], 0.0, False)  # [B, Hkv, G*T, D]
        out_p, lse_p = out_p.reshape(B, H, T, D), lse_p.reshape(B, H, T)
        lse_all = torch.logaddexp(lse, lse_p)
        out = (out.float() * (lse - lse_all).exp().unsqueeze(-1)
               + out_p.float() * (lse_p - lse_all).exp().unsqueeze(-1)).to(q.dtype)
    return out.transpose(1, 2)                              # [B, T, H, D]
