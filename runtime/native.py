"""Native CPU kernels (runtime/csrc/), compiled once with torch.utils.cpp_extension.

`bash run.sh` builds them during set-up (`python -m runtime.native build`); a run that finds no
build compiles on first use (about a minute, once) into build/native/ (gitignored), with
-march=native first and a portable build (no CPU-specific flags) if that fails. If neither
builds (no compiler, say), one line goes to stderr and callers use their pure-torch twin.
TRIFORCE_NATIVE=0 turns the kernels off (the torch path runs, for comparison).

    python -m runtime.native build     build (idempotent) and say which build loaded
    python -m runtime.native bench [threads] [repeats]     kernel vs SDPA, decode/verify shapes
    python -m runtime.native prefill [threads] [repeats]   mask-free prefill vs SDPA with a mask
"""
from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parent / "csrc" / "attention_cpu.cpp"
BUILD_DIR = Path(os.environ.get("TRIFORCE_NATIVE_DIR", SOURCE.parents[2] / "build" / "native"))
NAME = "triforce_attention_cpu"


def _load(flavour: str, flags: list[str]):
    from torch.utils import cpp_extension  # imported here: it pulls in setuptools

    directory = BUILD_DIR / flavour
    directory.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(name=f"{NAME}_{flavour}", sources=[str(SOURCE)], build_directory=str(directory),
                              extra_cflags=["-O3", "-std=c++17", "-fopenmp", *flags],  # at::parallel_for is OpenMP
                              extra_ldflags=["-fopenmp"], verbose=False)


@functools.cache
def attention_cpu():
    """The compiled attention module (functions `attend`, `has_avx512_bf16`), or None."""
    if os.environ.get("TRIFORCE_NATIVE", "1") == "0":
        return None
    errors = []
    for flavour, flags in (("native", ["-march=native"]), ("portable", [])):
        try:
            return _load(flavour, flags)
        except Exception as e:  # a compiler error, no compiler, or a broken build dir: fall back
            errors.append(f"{flavour}: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}")
    print(f"triforce: native CPU attention unavailable, using torch ({'; '.join(errors)})", file=sys.stderr)
    return None


def _bench(threads: int = 2, repeats: int = 7) -> None:
    """Kernel vs SDPA(+mask) side by side, bf16, B=1, SmolLM2's H=9, Hkv=3, D=64."""
    import time

    import torch

    from runtime.attention import attend_reference
    torch.set_num_threads(threads)
    kernel = attention_cpu()
    assert kernel is not None, "native attention did not build"
    B, H, Hkv, D, dt = 1, 9, 3, 64, torch.bfloat16
    peak_bytes, peak_flops = 34e9, 190e9   # this 2-core Xeon: STREAM-like read; bf16 matmul
    print(f"threads={threads} bf16 H={H} Hkv={Hkv} D={D}; roofline = max(bytes/34 GB/s, FLOPs/190 GFLOP/s)")
    print(f"{'S':>6} {'T':>3} {'kernel ms':>10} {'GB/s':>6} {'x roof':>7} {'sdpa ms':>8} {'GB/s':>6} {'x roof':>7} {'speedup':>8}")
    for S in (8192, 32768):
        cap = S + 64
        kc = torch.randn(B, Hkv, cap, D, dtype=dt)  # a cache buffer; attend reads the [:, :, :S] view
        vc = torch.randn(B, Hkv, cap, D, dtype=dt)
        for T in (1, 2, 4, 8, 16):
            q = torch.randn(B, H, T, D, dtype=dt)
            k, v = kc[:, :, :S], vc[:, :, :S]
            nbytes = 2 * B * Hkv * S * D * 2                   # K and V once
            flops = 4 * B * H * T * S * D                       # QK^T and PV
            roof = max(nbytes / peak_bytes, flops / peak_flops)
            times = {"kernel": [], "sdpa": []}
            for _ in range(repeats):                            # interleaved: the machine is shared
                for name, fn in (("kernel", lambda: kernel.attend(q, k, v, D ** -0.5)),
                                 ("sdpa", lambda: attend_reference(q, k, v))):
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(time.perf_counter() - t0)
            tk, ts = min(times["kernel"]), min(times["sdpa"])
            print(f"{S:>6} {T:>3} {tk * 1e3:>10.2f} {nbytes / tk / 1e9:>6.1f} {tk / roof:>7.2f} "
                  f"{ts * 1e3:>8.2f} {nbytes / ts / 1e9:>6.1f} {ts / roof:>7.2f} {ts / tk:>7.1f}x")


def _bench_prefill(threads: int = 2, repeats: int = 2, T: int = 1024) -> None:
    """One prefill chunk of T tokens against S keys: SDPA with the [G*T, S] mask against the
    mask-free split (prefix + causal square merged by LSE) and the native kernel."""
    import time

    import torch

    from runtime.attention import _attend_sdpa_split, attend_reference
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
        times = {name: [] for name in fns}
        for _ in range(repeats):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        best = {name: min(ts) for name, ts in times.items()}
        print(f"{S:>6} {best['mask'] * 1e3:>8.0f} {best['split'] * 1e3:>9.0f} {best.get('kernel', float('nan')) * 1e3:>10.0f}"
              f" {flops / best['split'] / 1e9:>14.1f} {best['mask'] / best['split']:>10.2f}x")


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "build"
    if command == "build":
        module = attention_cpu()
        if module is not None:
            print(f"native attention: {Path(module.__file__).parent.name} build"
                  f"{' (avx512_bf16 kernels)' if module.has_avx512_bf16() else ' (scalar kernels)'}")
    elif command == "bench":   # bench [threads] [repeats]
        _bench(*map(int, sys.argv[2:4]))
    elif command == "prefill":  # prefill [threads] [repeats]
        _bench_prefill(*map(int, sys.argv[2:4]))
    else:
        sys.exit("usage: python -m runtime.native build | bench | prefill")
