"""Micro-benchmarks of the attention kernels, side by side in one process (docs/BENCHMARKS.md):
    python -m triforce.runtime.bench.kernels bench [threads] [repeats]     decode/verify: kernel (dot, fma) vs SDPA vs a plain read
    python -m triforce.runtime.bench.kernels prefill [threads] [repeats]   one prefill chunk: mask vs split vs kernel
    python -m triforce.runtime.bench.kernels quant [threads] [repeats]     int8/int4 linears of a pass: native vs torch
    python -m triforce.runtime.bench.kernels sampling [threads] [repeats]  a round's probabilities and acceptance: native vs torch
    python -m triforce.runtime.bench.kernels against OLD.cpp [threads] [repeats]
        this attention kernel against another version of runtime/csrc/attention_cpu.cpp (e.g.
        `git show REV:runtime/csrc/attention_cpu.cpp > OLD.cpp`), both built here, interleaved
    python -m triforce.runtime.bench.kernels linears [OLD.cpp] [threads] [repeats]
        the target's packed bf16 linears at 1-16 rows against a plain read of their bytes, and
        against another version of runtime/csrc/layer_cpu.cpp when given one
"""
from __future__ import annotations

import itertools
import sys

from triforce.runtime.bench.measure import interleaved, timed
from triforce.runtime.native import attention_cpu
from triforce.runtime.probes import read_bandwidth_gbs


def _roofs(dtype) -> tuple[float, float]:
    """This machine's read bandwidth (bytes/s) and matmul peak in `dtype` (FLOP/s): the probes
    the passes suite uses, so that every roofline here is this machine's."""
    from triforce.runtime.bench.passes import matmul_peak_gflops
    return read_bandwidth_gbs() * 1e9, matmul_peak_gflops(dtype) * 1e9


def _bench(threads: int = 2, repeats: int = 15) -> None:
    """Kernel (both product variants) vs SDPA(+mask) and a plain read of the same K/V (torch's sum:
    the last column is the kernel's time over the read's), bf16, B=1, SmolLM2's H=9, Hkv=3, D=64.

    Medians of interleaved repeats (the machine is shared; min in brackets). K/V rotate through
    >= 160 MB of cache buffers, so every call reads from DRAM as a real pass does (30 layers of
    KV do not fit in L3), not from a hot L3.
    Shared machine: with sched_autogroup on (/proc/sys/kernel/sched_autogroup_enabled), other
    sessions' `nice -n 19` does not yield to this process (nice acts only within an autogroup);
    run it under `setsid sh -c 'echo -10 > /proc/self/autogroup; exec python -m ...'`.
    """
    import statistics

    import torch

    from triforce.runtime.attention import attend_reference
    torch.set_num_threads(threads)
    kernel = attention_cpu()
    assert kernel is not None, "native attention did not build"
    B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
    peak_bytes, peak_flops = _roofs(torch.bfloat16)
    default = "dot" if kernel.dot_bf16_default() else "fma"
    fns = {default: None, {"dot": "fma", "fma": "dot"}[default]: None, "sdpa": None, "read": None}
    print(f"threads={threads} bf16 H={H} Hkv={Hkv} D={D}; roofline = max(bytes/{peak_bytes / 1e9:.1f} GB/s, "
          f"FLOPs/{peak_flops / 1e9:.0f} GFLOP/s) (both measured here); "
          f"median of {repeats} (min); kernel default here: {default} (vdpbf16ps = dot, fp32 FMA = fma)")
    print(f"{'S':>6} {'T':>3} " + " ".join(f"{name + ' ms':>17} {'GB/s':>5} {'x roof':>6}" for name in fns)
          + f" {'sdpa/' + default:>10} {default + '/read':>10}")
    for S in (8192, 32768):
        nbytes = 2 * B * Hkv * S * D * 2                       # K and V once
        buffers = [(torch.randn(B, Hkv, S + 64, D, dtype=dt), torch.randn(B, Hkv, S + 64, D, dtype=dt))
                   for _ in range(max(2, -(-(160 << 20) // nbytes)))]   # cache buffers; attend reads [:, :, :S]
        for T in (1, 2, 4, 8, 16):
            q = torch.randn(B, H, T, D, dtype=dt)
            flops = 4 * B * H * T * S * D                       # QK^T and PV
            roof = max(nbytes / peak_bytes, flops / peak_flops)
            fns = {default: lambda k, v: kernel.attend(q, k, v, D ** -0.5),
                   "fma" if default == "dot" else "dot":
                       lambda k, v: kernel.attend(q, k, v, D ** -0.5, default != "dot"),
                   "sdpa": lambda k, v: attend_reference(q, k, v),
                   # the same K and V summed by torch: a plain read of the call's bytes, timed beside it
                   # (on a shared host the bandwidth moves between minutes: round 43 saw 35 and 60 GB/s)
                   "read": lambda k, v: [x[0, h].sum() for x in (k, v) for h in range(Hkv)]}   # [S, D] each: contiguous
            rotation = itertools.cycle(buffers)                 # each call reads another buffer: DRAM, not L3

            def on_next_buffer(fn):
                kc, vc = next(rotation)
                return lambda: fn(kc[:, :, :S], vc[:, :, :S])

            times = interleaved({name: lambda fn=fn: timed(on_next_buffer(fn))() for name, fn in fns.items()},
                                repeats, warmup=0)              # interleaved: the machine is shared
            med = {name: statistics.median(ts) for name, ts in times.items()}
            cells = [f"{med[n] * 1e3:>8.3f} ({min(ts) * 1e3:6.3f}) {nbytes / med[n] / 1e9:>5.1f} {med[n] / roof:>6.2f}"
                     for n, ts in times.items()]
            print(f"{S:>6} {T:>3} " + " ".join(cells) + f" {med['sdpa'] / med[default]:>9.1f}x"
                  f" {med[default] / med['read']:>9.2f}x", flush=True)


def _bench_prefill(threads: int = 2, repeats: int = 2, T: int = 1024) -> None:
    """One prefill chunk of T tokens against S keys: SDPA with the [G*T, S] mask against the
    mask-free split (prefix + causal square merged by LSE) and the native kernel."""
    import torch

    from triforce.runtime.attention import _attend_sdpa_split, attend_reference
    torch.set_num_threads(threads)
    kernel = attention_cpu()
    B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
    print(f"threads={threads} bf16 H={H} Hkv={Hkv} D={D}, one chunk of T={T} queries; ms per layer")
    print(f"{'S':>6} {'mask ms':>8} {'split ms':>9} {'kernel ms':>10} {'GFLOP/s split':>14} {'mask/split':>11}")
    for S in (8192, 32768):
        q = torch.randn(B, H, T, D, dtype=dt)
        k, v = torch.randn(B, Hkv, S, D, dtype=dt), torch.randn(B, Hkv, S, D, dtype=dt)
        flops = 4 * B * H * T * S * D
        fns = {"mask": lambda: attend_reference(q, k, v), "split": lambda: _attend_sdpa_split(q, k, v)}
        if kernel is not None:
            fns["kernel"] = lambda: kernel.attend(q, k, v, D ** -0.5)
        times = interleaved({name: timed(fn) for name, fn in fns.items()}, repeats, warmup=0)
        best = {name: min(ts) for name, ts in times.items()}
        print(f"{S:>6} {best['mask'] * 1e3:>8.0f} {best['split'] * 1e3:>9.0f} {best.get('kernel', float('nan')) * 1e3:>10.0f}"
              f" {flops / best['split'] / 1e9:>14.1f} {best['mask'] / best['split']:>10.2f}x")


SMOLLM2_LINEARS = [(960, 576), (576, 576), (3072, 576), (576, 1536)]   # [O, K]: qkv, o, gate_up, down
SMOLLM2_LAYERS, SMOLLM2_HEAD = 30, (49152, 576)
SMOLLM2_PASS = [s for _ in range(SMOLLM2_LAYERS) for s in SMOLLM2_LINEARS] + [SMOLLM2_HEAD]   # a pass's linears, in order


def _bench_quant(threads: int = 2, repeats: int = 7, rows=(1, 2, 4, 8, 16, 64, 256)) -> None:
    """Every quantized linear of one SmolLM2-135M pass (30 layers x qkv, o, gate_up, down + the
    head: 134.5M weights, each matrix its own copy, so that nothing stays in cache), N rows of
    bf16 activations: runtime/csrc/quant_cpu.cpp against torch's kernels, both through the
    modules' forward (what a pass pays) and the kernels alone. Medians of `repeats`, interleaved.
    Roofline: packed weight bytes / the read bandwidth measured here."""
    import statistics

    import torch
    import torch.nn as nn

    from triforce.runtime.quant import Int4Linear, Int8Linear, _native_kernels
    torch.set_num_threads(threads)
    kernel = _native_kernels()
    assert kernel is not None, "native quant_cpu did not build its vector kernels (avx512_vnni or AVX2)"
    shapes = SMOLLM2_PASS
    weights = sum(o * k for o, k in shapes)
    bandwidth = read_bandwidth_gbs() * 1e9   # the floor column: packed bytes / this machine's bandwidth
    print(f"threads={threads}, {len(shapes)} matrices, {weights / 1e6:.1f}M weights, bf16 activations; "
          f"medians of {repeats}; GB/s of weight bytes read")
    print(f"{'kind':>4} {'N':>3} {'native ms':>10} {'GB/s':>5} {'kernel ms':>10} {'GB/s':>5} "
          f"{'torch ms':>9} {'GB/s':>5} {'floor ms':>9} {'speedup':>8}")
    torch.manual_seed(0)
    for cls in (Int8Linear, Int4Linear):
        name = "int8" if cls is Int8Linear else "int4"
        layers = {"native": [], "torch": []}
        for o, k in shapes:
            dense = nn.Linear(k, o, bias=False, dtype=torch.bfloat16)
            layers["native"].append(cls(dense, native=True))
            layers["torch"].append(cls(dense, native=False))
        def nbytes(kind):
            return sum(t.numel() * t.element_size() for m in layers[kind] for t in m.buffers())
        native_bytes, torch_bytes = nbytes("native"), nbytes("torch")
        for n in rows:
            xs = {k: torch.randn(n, k, dtype=torch.bfloat16) for k in {k for _, k in shapes}}
            calls = [(m, xs[m.in_features], m.packed, getattr(m, "scales", None)) for m in layers["native"]]
            if cls is Int8Linear:
                def bare():
                    return [kernel.int8_linear(x, p, s, None, m.out_features) for m, x, p, s in calls]
            else:
                def bare():
                    return [kernel.int4_linear(x, p, None, m.out_features) for m, x, p, _ in calls]
            fns = {"native": lambda: [m(xs[m.in_features]) for m in layers["native"]],
                   "kernel": bare,
                   "torch": lambda: [m(xs[m.in_features]) for m in layers["torch"]]}
            with torch.inference_mode():
                times = interleaved({k: timed(fn) for k, fn in fns.items()}, repeats, warmup=1)
            t = {k: statistics.median(v) for k, v in times.items()}
            print(f"{name:>4} {n:>3} {t['native'] * 1e3:>10.2f} {native_bytes / t['native'] / 1e9:>5.1f} "
                  f"{t['kernel'] * 1e3:>10.2f} {native_bytes / t['kernel'] / 1e9:>5.1f} "
                  f"{t['torch'] * 1e3:>9.2f} {torch_bytes / t['torch'] / 1e9:>5.1f} "
                  f"{native_bytes / bandwidth * 1e3:>9.2f} {t['torch'] / t['native']:>7.2f}x")
        del layers


def _bench_sampling(threads: int = 2, repeats: int = 51) -> None:
    """What a speculative round spends outside the passes, per call at V = 49,152 (T = 0.6, top_p
    0.9, logits ~ N(0, 3^2)): probs_from_logits of R rows and accept() of K drafts, the native
    kernels (csrc/sampling_cpu.cpp) against their torch definitions, interleaved. Medians (us)."""
    import statistics

    import torch

    from triforce.runtime import accept as accept_mod
    from triforce.runtime.sampling import SamplingParams, probs_from_logits, probs_from_logits_reference
    torch.set_num_threads(threads)
    params, V, g = SamplingParams(temperature=0.6, top_p=0.9), 49152, torch.Generator().manual_seed(0)
    native_accept = accept_mod._native_accept

    def torch_accept(*a):
        accept_mod._native_accept = lambda q, p: None
        try:
            return accept_mod.accept(*a)
        finally:
            accept_mod._native_accept = native_accept

    print(f"threads={threads}, V={V}, T=0.6, top_p=0.9; median of {repeats} interleaved calls (us)")
    for R in (1, 2, 4):
        logits = torch.randn(R, V, generator=g) * 3
        fns = {"native": lambda: probs_from_logits(logits, params), "torch": lambda: probs_from_logits_reference(logits, params)}
        t = {k: statistics.median(v) * 1e6 for k, v in interleaved({k: timed(f) for k, f in fns.items()}, repeats).items()}
        print(f"probs of {R} rows    native {t['native']:7.0f}  torch {t['torch']:7.0f}")
    for K in (1, 3, 5):
        q = probs_from_logits(torch.randn(1, K, V, generator=g) * 3, params)
        p = probs_from_logits(torch.randn(1, K + 1, V, generator=g) * 3, params)
        drafted = q.argmax(-1)
        fns = {"native": lambda: accept_mod.accept(drafted, q, p, g), "torch": lambda: torch_accept(drafted, q, p, g)}
        t = {k: statistics.median(v) * 1e6 for k, v in interleaved({k: timed(f) for k, f in fns.items()}, repeats).items()}
        print(f"accept of {K} drafts  native {t['native']:7.0f}  torch {t['torch']:7.0f}")


def build_beside(source: str, name: str):
    """`source`, another version of one of runtime/csrc's kernel files, compiled here as module
    `name` (beside this build's own, for an A/B in one process)."""
    import os
    import tempfile

    from torch.utils import cpp_extension

    from triforce.runtime.native import CSRC
    build = tempfile.mkdtemp(prefix=f"triforce-{name}-")
    return cpp_extension.load(name=name, sources=[os.path.abspath(source)], build_directory=build,
                              extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", f"-I{CSRC}"],
                              extra_ldflags=["-fopenmp"])


def _bench_against(source: str, threads: int = 2, repeats: int = 9) -> None:
    """A/B of two attention kernels in one process: this build and `source` compiled beside it,
    interleaved, on 30 layers of SmolLM2's KV (bf16, H=9, Hkv=3, D=64) at 7,200 and 32,000 keys for
    T = 1..16 (decode/verify), and one 1,024-row prefill chunk. Medians; ratio = old / new."""
    import statistics

    import torch
    torch.set_num_threads(threads)
    old = build_beside(source, "triforce_attention_against")
    new = attention_cpu()
    assert new is not None, "native attention did not build"
    print(f"threads={threads}, bf16, 30 layers of KV; median of {repeats} interleaved (ms); ratio = old / new")
    for S in (7200, 32000):
        layers = [(torch.randn(1, 3, S, 64).bfloat16(), torch.randn(1, 3, S, 64).bfloat16()) for _ in range(30)]
        for T in (1, 2, 3, 4, 5, 6, 8, 10, 16):   # 2 | 3: one 6-row vdpbf16ps tile | two; 5 | 6: one AMX tile | two (G = 3)
            q = torch.randn(1, 9, T, 64).bfloat16()
            fns = {name: (lambda m=m: [m.attend(q, k, v, 0.125) for k, v in layers]) for name, m in (("old", old), ("new", new))}
            t = {k: statistics.median(v) for k, v in interleaved({k: timed(f) for k, f in fns.items()}, repeats).items()}
            print(f"S={S:>6} T={T:>2}  old {t['old'] * 1e3:7.2f}  new {t['new'] * 1e3:7.2f}  ratio {t['old'] / t['new']:.2f}")
        k, v = layers[0]
        q = torch.randn(1, 9, 1024, 64).bfloat16()
        fns = {name: (lambda m=m: m.attend(q, k, v, 0.125)) for name, m in (("old", old), ("new", new))}
        t = {k: statistics.median(v) for k, v in interleaved({k: timed(f) for k, f in fns.items()}, max(3, repeats // 3)).items()}
        print(f"S={S:>6} prefill chunk of 1,024 rows (one layer)  old {t['old'] * 1e3:7.2f}  new {t['new'] * 1e3:7.2f}  "
              f"ratio {t['old'] / t['new']:.2f}")
        del layers


def _bench_linears(source: str | None = None, threads: int = 2, repeats: int = 11, rows=(1, 2, 3, 4, 6, 8, 16)) -> None:
    """The target's 120 decoder linears and its head (SmolLM2-135M's shapes, packed bf16, random
    weights: 269 MB, past any cache) at N rows, interleaved with torch's sum of the same number of
    bytes ("x read": the linears' time over the read's, which moves with the host's bandwidth) and,
    given `source` (another version of runtime/csrc/layer_cpu.cpp), with that build's linears
    (ratio = old / new). Medians, ms."""
    import statistics

    import torch
    import torch.nn as nn

    from triforce.runtime.native import layer_cpu
    from triforce.runtime.ops import PackedLinear
    torch.set_num_threads(threads)
    builds = {"new": layer_cpu()}
    assert builds["new"] is not None, "native linears did not build"
    if source:
        builds["old"] = build_beside(source, "triforce_layer_against")
    shapes = SMOLLM2_PASS
    mats = [PackedLinear(nn.Linear(k, o, bias=False, dtype=torch.bfloat16)) for o, k in shapes]
    nbytes = sum(m.packed.numel() * m.packed.element_size() for m in mats)
    flat = torch.ones(nbytes // 4)
    print(f"threads={threads}, bf16, {len(shapes)} packed linears ({nbytes / 1e6:.0f} MB); median of {repeats} interleaved (ms)")
    for n in rows:
        xs = {k: torch.randn(n, k, dtype=torch.bfloat16) for k in {k for _, k in shapes}}
        fns = {name: (lambda b=b: [b.linear_packed(xs[k], m.packed, None, o) for (o, k), m in zip(shapes, mats)])
               for name, b in builds.items()}
        fns["read"] = flat.sum
        t = {k: statistics.median(v) for k, v in interleaved({k: timed(f) for k, f in fns.items()}, repeats).items()}
        line = f"N={n:>2}  new {t['new'] * 1e3:7.2f} ({t['new'] / t['read']:.2f}x read)"
        if "old" in t:
            line += f"  old {t['old'] * 1e3:7.2f} ({t['old'] / t['read']:.2f}x read)  ratio {t['old'] / t['new']:.2f}"
        print(line + f"  read {nbytes / t['read'] / 1e9:.1f} GB/s", flush=True)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "bench"
    if command == "bench":
        _bench(*map(int, sys.argv[2:4]))
    elif command == "prefill":
        _bench_prefill(*map(int, sys.argv[2:4]))
    elif command == "quant":
        _bench_quant(*map(int, sys.argv[2:4]))
    elif command == "sampling":
        _bench_sampling(*map(int, sys.argv[2:4]))
    elif command == "against" and len(sys.argv) > 2:
        _bench_against(sys.argv[2], *map(int, sys.argv[3:5]))
    elif command == "linears":
        args = sys.argv[2:]
        source = args.pop(0) if args and not args[0].isdigit() else None
        _bench_linears(source, *map(int, args[:2]))
    else:
        sys.exit("usage: python -m triforce.runtime.bench.kernels bench | prefill | quant | sampling [threads] [repeats]\n"
                 "       python -m triforce.runtime.bench.kernels against OLD_attention_cpu.cpp [threads] [repeats]\n"
                 "       python -m triforce.runtime.bench.kernels linears [OLD_layer_cpu.cpp] [threads] [repeats]")
