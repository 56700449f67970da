"""glibc's allocator, told to keep freed memory for reuse (Linux; a no-op elsewhere).

Each round of a decode loop allocates a few tensors of 0.2-1 MB (logits rows [k, V] fp32,
distributions, their residuals). With glibc's defaults, blocks that size are mapped fresh from the
kernel and unmapped when freed (or trimmed off the heap's top), so every round page-faults them in
again: on a VM, 3-7x the cost of the arithmetic. Measured in `ar`'s decode loop at T = 0.6
(V = 49,152): the distribution of one row cost 0.49 ms a token with the defaults and 0.14 ms with
blocks below 64 MB served from the heap and up to 256 MB of freed heap kept
(docs/BENCHMARKS.md, round 4). The KV caches and weights, larger than that, are still mapped.
TRIFORCE_MALLOC=0 leaves the allocator as it is.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

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
