"""Native CPU kernels (runtime/csrc/), compiled once with torch.utils.cpp_extension.

`bash run.sh` builds them during set-up (`python -m triforce.runtime.native build`); a run that finds no
build, or one older than its sources, compiles on first use (about a minute, once; one line on stderr
says so) into build/native/ (gitignored), with
-march=native first and a portable build (no CPU-specific flags) if that fails. If neither
builds (no compiler, say), one line goes to stderr and callers use their pure-torch twin.
TRIFORCE_NATIVE=0 turns the kernels off (the torch path runs, for comparison).

    python -m triforce.runtime.native build     build (idempotent) and say which build loaded
    python -m triforce.runtime.bench.kernels bench | prefill | quant    the kernels' micro-benchmarks
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
from pathlib import Path

CSRC = Path(__file__).resolve().parent / "csrc"
SOURCES = sorted(CSRC.glob("*.cpp"))      # one extension module per file (run.sh rebuilds when one changes)
BUILD_DIR = Path(os.environ.get("TRIFORCE_NATIVE_DIR", CSRC.parents[1] / "build" / "native"))


def _load(kernel: str, flavour: str, flags: list[str]):
    from torch.utils import cpp_extension  # imported here: it pulls in setuptools

    directory = BUILD_DIR / f"{kernel}_{flavour}"
    directory.mkdir(parents=True, exist_ok=True)
    with build_lock(directory):
        source = CSRC / f"{kernel}.cpp"
        if needs_build(directory / f"triforce_{kernel}_{flavour}.so", [source, *CSRC.glob("*.h")]):
            # a build takes about a minute: say so, rather than stall a run's first pass silently
            print(f"triforce: compiling native kernel {kernel} ({flavour}) for this CPU, once (about a minute)",
                  file=sys.stderr, flush=True)
        return cpp_extension.load(name=f"triforce_{kernel}_{flavour}", sources=[str(source)],
                                  build_directory=str(directory),
                                  extra_cflags=["-O3", "-std=c++17", "-fopenmp", *flags],  # at::parallel_for is OpenMP
                                  extra_ldflags=["-fopenmp"], verbose=False)


def needs_build(built: Path, sources: list[Path]) -> bool:
    """Whether the build tool will compile: no module yet, or a source or header newer than it
    (ninja's rule, from the files' times; an edited and reverted file counts as changed)."""
    if not built.is_file():
        return True
    made = built.stat().st_mtime
    return any(path.stat().st_mtime > made for path in sources)


@contextlib.contextmanager
def build_lock(directory: Path):
    """One build at a time in `directory`, by a lock the kernel releases when its holder dies.
    torch's own lock is a plain file: a build killed midway (a time limit, Ctrl-C) leaves it, and
    every later build waits for it forever. Holding this lock, any such file is stale: removed."""
    import fcntl
    with open(directory / "triforce.flock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        (directory / "lock").unlink(missing_ok=True)
        yield


@functools.cache
def _module(kernel: str):
    """The compiled module of csrc/{kernel}.cpp (-march=native, else portable), or None."""
    if os.environ.get("TRIFORCE_NATIVE", "1") == "0":
        return None
    errors = []
    for flavour, flags in (("native", ["-march=native"]), ("portable", [])):
        try:
            return _load(kernel, flavour, flags)
        except Exception as e:  # a compiler error, no compiler, or a broken build dir: fall back
            errors.append(f"{flavour}: {str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__}")
    print(f"triforce: native CPU kernel {kernel} unavailable, using torch ({'; '.join(errors)})", file=sys.stderr)
    return None


def attention_cpu():
    """The compiled attention module (functions `attend`, `has_avx512_bf16`), or None."""
    return _module("attention_cpu")


def layer_cpu():
    """The compiled per-layer ops (`linear`, `rms_norm`, `rope`, `silu_mul`, `has_avx512_bf16`), or
    None. `linear` needs avx512_bf16 (runtime.ops checks); the others run on any build."""
    return _module("layer_cpu")


def sampling_cpu():
    """The compiled `probs_rows` (runtime.sampling.probs_from_logits for top_k = 0 on the CPU), or None."""
    return _module("sampling_cpu")


def quant_cpu():
    """The compiled weight-only quantized linears (`int8_linear`, `int4_linear`, `has_kernels`), or
    None. The kernels need avx512_vnni and avx512_bf16, or AVX2 (runtime.quant checks has_kernels())."""
    return _module("quant_cpu")


def _compile(kernel: str) -> str | None:
    """Builds (or finds built) csrc/{kernel}.cpp in a worker process: the line saying which build
    loaded (the module itself does not travel back), or None where none did."""
    module = _module(kernel)
    if module is None:
        return None
    kind = "avx512_bf16 kernels" if module.has_avx512_bf16() else \
        "AVX2 int8/int4 kernels" if getattr(module, "has_kernels", lambda: False)() else \
        "AVX2 packed linear, other kernels scalar" if getattr(module, "has_packed", lambda: False)() else \
        "AVX2 decode/verify items, prefill scalar" if getattr(module, "has_avx2", lambda: False)() else "scalar kernels"
    return f"native {kernel}: {Path(module.__file__).parent.name} build ({kind})"


def build_all() -> list[str | None]:
    """Compiles the sources at the same time, one process each up to the CPU count (each is one
    compiler job of 25-40 s since the sources include csrc/torch_api.h, not torch/extension.h: the
    four took 150 s on 2 cores before and 60 s after, round 42); _compile's line for each."""
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(max_workers=max(1, min(len(SOURCES), os.cpu_count() or 1))) as pool:
        return list(pool.map(_compile, [source.stem for source in SOURCES]))


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "build"
    if command == "build":
        for line in build_all():   # (a source that built nothing said so on stderr, once)
            if line is not None:
                print(line)
    else:
        sys.exit("usage: python -m triforce.runtime.native build (benchmarks: python -m triforce.runtime.bench.kernels)")
