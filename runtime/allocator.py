"""The host allocator, set once per process at import (Linux; no-ops elsewhere).

keep_freed_memory: glibc's allocator, told to keep freed memory for reuse.

Each round of a decode loop allocates a few tensors of 0.2-1 MB (logits rows [k, V] fp32,
distributions, their residuals). With glibc's defaults, blocks that size are mapped fresh from the
kernel and unmapped when freed (or trimmed off the heap's top), so every round page-faults them in
again: on a VM, 3-7x the cost of the arithmetic. Measured in `ar`'s decode loop at T = 0.6
(V = 49,152): the distribution of one row cost 0.49 ms a token with the defaults and 0.14 ms with
blocks below 64 MB served from the heap and up to 256 MB of freed heap kept
(docs/BENCHMARKS.md, round 4). The KV caches and weights, larger than that, are still mapped.
TRIFORCE_MALLOC=0 leaves the allocator as it is.

ask_for_huge_pages: torch's large CPU blocks (weights, KV caches) on transparent huge pages. A pass
streams hundreds of MB through the TLB, 4 KB at a time by default; with 2 MB pages, measured in one
process with the same data on either (docs/BENCHMARKS.md, round 40): packed bf16 linears of the
default model 1.05-1.06x faster, attention over 30 layers' K/V 0.99-1.05x. torch does it itself when
THP_MEM_ALLOC_ENABLE=1 is set before its first allocation (blocks of 2 MB or more are advised
MADV_HUGEPAGE; c10/core/alloc_cpu.cpp), so importing triforce.runtime before torch allocates turns
it on; THP_MEM_ALLOC_ENABLE=0 in the environment keeps it off.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"   # "always [madvise] never"
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3   # glibc's mallopt parameters (malloc.h)
MAPPED_FROM = 64 << 20      # blocks at least this large are mapped (and unmapped) as before
KEPT = 256 << 20            # freed heap kept for reuse before it is returned to the kernel


def keep_freed_memory() -> bool:
    """Sets glibc's thresholds once per process; True if they were set."""
    if os.environ.get("TRIFORCE_MALLOC", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):   # not glibc (musl has no mallopt)
        return False
    return all(mallopt(param, value) == 1 for param, value in
               ((M_MMAP_THRESHOLD, MAPPED_FROM), (M_TRIM_THRESHOLD, KEPT), (M_TOP_PAD, MAPPED_FROM)))


def ask_for_huge_pages() -> bool:
    """Sets THP_MEM_ALLOC_ENABLE=1 unless already set or the kernel gives no huge pages; True if on."""
    try:
        with open(THP_ENABLED) as f:
            if "[never]" in f.read():
                return False
    except OSError:   # not Linux, or a kernel without transparent huge pages
        return False
    return os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1") == "1"
