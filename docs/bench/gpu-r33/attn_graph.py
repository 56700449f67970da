"""Round 33, GPU: which attention over a fixed-capacity buffer could let the full target's verify
pass (T = 2..16) replay from a CUDA graph. A replayed pass cannot slice the cache to its filled
length (a shape), so it attends to the whole buffer with the visibility as data. Round 24 measured
SDPA under a boolean [T, capacity] mask at 85-90 ms a pass at 120K (T >= 2) against 23 ms eager on
torch's flash kernel over the filled length. Candidates, one layer of Llama-2-7B's attention
(H = Hkv = 32, D = 128, bf16), each captured 32 times in one graph (a pass's 32 layers):

    eager      what a verify pass runs now: SDPA + bottom-right CausalBias over the filled length,
               eager (not captured; its key length is a shape)
    bool       SDPA under the boolean mask (runtime/attention.py attend_masked, as the lower levels replay)
    float      SDPA under an additive float mask
    chunks     torch's flash kernel in its variable-length form: the prefix split into chunks of
               4,096 keys, each chunk a "sequence" whose used length (seqused_k) is data, all chunks
               seeing the same T queries; the pass's own T keys as a causal square; merged by
               log-sum-exp. Reads only the filled keys, spread over chunks x heads blocks.

Prints ms per layer call, GB/s of K+V read over the filled length, the HBM roofline of that read,
and each candidate's largest difference from `eager`. On CPU (no graphs, no flash kernel) it runs
a small shape eagerly, to check the code.

    python3 docs/bench/gpu-r33/attn_graph.py [--contexts 32768 122880] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import time

import torch
import torch.nn.functional as F

CHUNK = 4096
LAYERS = 32


def eager(q, kbuf, vbuf, knew, vnew, n, T):
    from torch.nn.attention.bias import causal_lower_right
    k, v = kbuf[:, :, :n + T], vbuf[:, :, :n + T]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(T, n + T))   # [B, H, T, D]


def visible(index, cap, device):
    return torch.arange(cap, device=device) <= index[:, None]                      # [T, cap]


def bool_mask(q, kbuf, vbuf, index):
    return F.scaled_dot_product_attention(q, kbuf, vbuf, attn_mask=visible(index, kbuf.shape[2], q.device))


def float_mask(q, kbuf, vbuf, index):
    bias = torch.zeros((), dtype=q.dtype, device=q.device).masked_fill(
        ~visible(index, kbuf.shape[2], q.device), float("-inf"))                   # [T, cap]
    return F.scaled_dot_product_attention(q, kbuf, vbuf, attn_mask=bias)


def flash_varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal, used=None):
    """q [Tq, H, D], k/v [Sk, Hkv, D] (any token stride) -> out [Tq, H, D], lse [H, Tq] fp32."""
    scale = q.shape[-1] ** -0.5
    if not q.is_cuda:       # the CPU dry run: what the kernel computes, in torch
        return flash_varlen_cpu(q, k, v, cu_q, cu_k, causal, used, scale)
    out, lse, *_ = torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, 0.0, causal, False,
                                                           scale=scale, seqused_k=used)
    if lse.dim() == 3:      # [B, H, max_q] padded form
        lse = lse[0]
    return out, lse


def flash_varlen_cpu(q, k, v, cu_q, cu_k, causal, used, scale):
    outs, lses = [], []
    for i in range(cu_q.shape[0] - 1):
        qi = q[cu_q[i]:cu_q[i + 1]].transpose(0, 1).float()                       # [H, t, D]
        ki = k[cu_k[i]:cu_k[i] + (used[i] if used is not None else cu_k[i + 1] - cu_k[i])].transpose(0, 1).float()
        vi = v[cu_k[i]:cu_k[i] + ki.shape[1]].transpose(0, 1).float()
        s = qi @ ki.transpose(1, 2) * scale                                        # [H, t, s]
        if causal:
            t, S = s.shape[1], s.shape[2]
            s = s.masked_fill(torch.arange(S) > torch.arange(t)[:, None] + S - t, float("-inf"))
        lse = torch.logsumexp(s, -1) if s.shape[-1] else torch.full(s.shape[:2], float("inf"))
        outs.append((torch.softmax(s, -1).nan_to_num(0.0) @ vi).transpose(0, 1).to(q.dtype))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, 1)


def chunks(q, kbuf, vbuf, knew, vnew, start, T, consts):
    """The prefix [0, start) in chunks of CHUNK keys (used lengths from `start`, data), plus the T
    new keys as a causal square, merged by log-sum-exp. q [1, H, T, D], kbuf [1, Hkv, cap, D]."""
    cu_q, cu_k, first, cu_sq = consts
    C = cu_k.shape[0] - 1
    H, D = q.shape[1], q.shape[3]
    qt = q[0].transpose(0, 1)                                                      # [T, H, D]
    used = (start - first).clamp(0, CHUNK).to(torch.int32)                         # [C]
    out_p, lse_p = flash_varlen(qt.repeat(C, 1, 1).contiguous(), kbuf[0].transpose(0, 1), vbuf[0].transpose(0, 1),
                                cu_q, cu_k, T, CHUNK, False, used)                 # [C*T, H, D], [H, C*T]
    lse_p = torch.where(used.repeat_interleave(T)[None, :] > 0, lse_p, float("-inf"))
    out_s, lse_s = flash_varlen(qt.contiguous(), knew[0].transpose(0, 1).contiguous(),
                                vnew[0].transpose(0, 1).contiguous(), cu_sq, cu_sq, T, T, True)   # [T, H, D], [H, T]
    lse = torch.cat([lse_p.reshape(H, C, T), lse_s[:, None]], 1)                   # [H, C+1, T]
    outs = torch.cat([out_p.reshape(C, T, H, D), out_s[None]], 0)                  # [C+1, T, H, D]
    w = torch.softmax(lse, dim=1).nan_to_num(0.0)                                  # [H, C+1, T]
    out = (outs.float() * w.permute(1, 2, 0)[..., None]).sum(0)                    # [T, H, D]
    return out.to(q.dtype).transpose(0, 1)[None]                                   # [1, H, T, D]


def timed_graph(fn, reps: int = 5) -> float:
    """ms per call of fn, captured LAYERS times in one graph, replayed `reps` times."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAYERS):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps / LAYERS * 1e3


def timed_eager(fn, reps: int = 5) -> float:
    for _ in range(2):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        for _ in range(LAYERS):
            fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps / LAYERS * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", type=int, nargs="+", default=[32768, 122880])
    ap.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--out")
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    dev, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    H, D = (32, 128) if cuda else (4, 16)
    contexts = args.contexts if cuda else [2 * CHUNK]
    bw = None
    if cuda:
        x = torch.ones(2 << 30, dtype=torch.float32, device=dev)      # 8 GiB, far beyond the L2
        x.sum()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        x.sum()
        torch.cuda.synchronize()
        bw = x.numel() * 4 / (time.perf_counter() - t0) / 1e9
        del x
        print(torch.__version__, torch.cuda.get_device_name(0), f"read {bw:.0f} GB/s", flush=True)
    rows = []
    g = torch.Generator(device=dev).manual_seed(0)
    for cap in contexts:
        kbuf = torch.randn(1, H, cap, D, device=dev, dtype=dtype, generator=g)
        vbuf = torch.randn(1, H, cap, D, device=dev, dtype=dtype, generator=g)
        C = cap // CHUNK
        for T in args.tokens:
            n = cap - 64                                   # the filled prefix; the T new keys at [n, n + T)
            q = torch.randn(1, H, T, D, device=dev, dtype=dtype, generator=g)
            knew, vnew = kbuf[:, :, n:n + T].clone(), vbuf[:, :, n:n + T].clone()
            index = torch.arange(n, n + T, device=dev)
            start = torch.tensor(n, device=dev)
            consts = (torch.arange(0, (C + 1) * T, T, dtype=torch.int32, device=dev),
                      torch.arange(0, cap + 1, CHUNK, dtype=torch.int32, device=dev),
                      torch.arange(C, device=dev) * CHUNK,
                      torch.tensor([0, T], dtype=torch.int32, device=dev))
            ref = eager(q, kbuf, vbuf, knew, vnew, n, T).float()
            gb = 2 * n * H * D * kbuf.element_size() / 1e9
            cands = {"eager": (lambda: eager(q, kbuf, vbuf, knew, vnew, n, T), False),
                     "bool": (lambda: bool_mask(q, kbuf, vbuf, index), True),
                     "float": (lambda: float_mask(q, kbuf, vbuf, index), True),
                     "chunks": (lambda: chunks(q, kbuf, vbuf, knew, vnew, start, T, consts), True)}
            for name, (fn, graphed) in cands.items():
                row = dict(context=cap, T=T, attention=name)
                try:
                    row["max_diff"] = float((fn().float() - ref).abs().max())
                    ms = (timed_graph(fn) if graphed and cuda else timed_eager(fn))
                    row.update(ms=round(ms, 4), gbs=round(gb / ms * 1e3, 1),
                               roofline_ms=round(gb / bw * 1e3, 4) if bw else None)
                except Exception as e:   # noqa: BLE001 - a candidate the machine refuses is a result
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                rows.append(row)
                print(json.dumps(row), flush=True)
            if cuda:
                torch.cuda.empty_cache()
        del kbuf, vbuf
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
