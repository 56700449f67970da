"""Hardware probes: which device a run uses, what GPUs NVML sees, and measured bandwidths.

A leaf module (rule 11): it imports nothing of this project but errors, so the engine, the
planner (offload/plan.py), the Ray shards and the benchmarks all read the machine the same way.
Every probe that can fail without a GPU or a driver returns a fallback and says so in `notes`.
"""
from __future__ import annotations

import functools
import time

import torch

from triforce.runtime.errors import UserError

GB = 1e9
PCIE_GBS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}  # GB/s per lane after line encoding


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when torch sees one, else cpu; `cuda[:N]` is refused without CUDA."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available; use --device cpu (or auto)")
    return device


def nvml_gpus(notes: list[str] | None = None) -> list[dict]:
    """GPUs as NVML sees them, one dict each: index, name, memory (bytes), pcie_gen, pcie_width,
    link_line_rate and bandwidth (bytes/s), driver. [] without NVML or a driver (not an error);
    what could not be read is appended to `notes` and assumed."""
    notes = [] if notes is None else notes
    try:
        import pynvml  # nvidia-ml-py
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 -- no library, no driver: a CPU machine, nothing found
        notes.append(f"NVML unavailable ({type(e).__name__}: {str(e) or 'no NVIDIA driver'})")
        return []
    gpus = []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = _text(pynvml.nvmlDeviceGetName(h))
            gen = _nvml_or(notes, name, "PCIe generation", lambda: pynvml.nvmlDeviceGetMaxPcieLinkGeneration(h), 4)
            width = _nvml_or(notes, name, "PCIe width", lambda: pynvml.nvmlDeviceGetMaxPcieLinkWidth(h), 16)
            bus = _nvml_or(notes, name, "memory bus width", lambda: pynvml.nvmlDeviceGetMemoryBusWidth(h), None)
            clock = _nvml_or(notes, name, "memory clock",
                             lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM), None)
            bandwidth = bus * clock * 1e6 * 2 / 8 if bus and clock else 900 * GB  # DDR: two transfers per clock
            gpus.append(dict(index=i, name=name, memory=pynvml.nvmlDeviceGetMemoryInfo(h).total, pcie_gen=gen,
                             pcie_width=width, link_line_rate=PCIE_GBS_PER_LANE.get(gen, 1.969) * width * GB,
                             bandwidth=bandwidth, driver=driver))
    except Exception as e:  # noqa: BLE001 -- a half-working driver: keep what was read
        notes.append(f"NVML query failed ({type(e).__name__}: {e})")
    finally:
        pynvml.nvmlShutdown()
    return gpus


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _nvml_or(notes, name, what, read, default):
    try:
        return read()
    except Exception as e:  # noqa: BLE001 -- NVML raises its own error types per query
        notes.append(f"{name}: NVML could not read the {what} ({type(e).__name__}); assumed {default}")
        return default


def read_bandwidth_gbs(megabytes: int = 1024, repeats: int = 5, device: str | torch.device = "cpu") -> float:
    """GB/s of a streaming read on `device` (a sum over a tensor far larger than its caches: on a
    GPU, HBM; give a GPU several GB, its L2 holds tens of MB)."""
    device = torch.device(device)
    x = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32, device=device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x.sum()  # warm-up: fault the pages in
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        x.sum()
        sync()   # host sync: timing boundary only
        times.append(time.perf_counter() - start)
    return x.numel() * 4 / min(times) / 1e9


@functools.cache
def cpu_read_bandwidth() -> float:
    """Bytes/s of a CPU streaming read (measured once per process)."""
    return read_bandwidth_gbs(megabytes=256, repeats=3) * GB


@functools.cache
def h2d_bandwidth(megabytes: int = 256) -> float | None:
    """Bytes/s of a page-locked host -> device copy (measured once per process); None if it fails."""
    try:
        src = torch.empty(megabytes * 2**20, dtype=torch.uint8).pin_memory()
        dst = torch.empty_like(src, device="cuda")
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()  # host sync: timing
        start = time.perf_counter()
        for _ in range(3):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()  # host sync: timing
        return 3 * src.numel() / (time.perf_counter() - start)
    except RuntimeError:
        return None


def host_memory() -> float:
    """Bytes of host RAM usable for the host tier: 80% of what is available now."""
    import psutil
    return psutil.virtual_memory().available * 0.8
