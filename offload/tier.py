"""The two memory tiers and the one copy primitive between them.

    device tier   GPU memory; on a CPU-only machine, the process's own working memory
    host tier     named shared-memory arenas: page-locked (cudaHostRegister) on CUDA machines so
                  that copies are DMA and asynchronous; plain shared memory on CPU-only machines.
                  Named, so that another process (the memory actor of the Ray backend) can own the
                  arenas and the process computing on them maps them with HostTier.attach.

Copies run on Copier lanes, one per purpose (load_weight, load_cache, store_cache), created in one
place. A lane is a CUDA stream on GPUs and a one-thread FIFO worker on CPU: both run their copies
in order, concurrently with compute, and return an Event. Ordering is by events only:
    ev = copier.copy("load_cache", dst, src, after=[...])   # runs once every `after` event is done
    copier.wait(ev)                                         # compute waits for it (no global sync)
    copier.record()                                         # an event marking compute issued so far
so a buffer is never read before its copy completed, nor overwritten before compute used it.
"""
from __future__ import annotations

import atexit
import math
import os
import shutil
import sys
import threading
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing import resource_tracker, shared_memory

import torch

from triforce.runtime.errors import UserError

LANES = ("load_weight", "load_cache", "store_cache")
SEGMENT_PREFIX = "triforce-pid"   # every arena is /dev/shm/triforce-pid<owner pid>-...: its owner can be told dead
PID_MAX = 1 << 22                 # Linux's largest pid_max: a larger number is not a pid
SHM_DIR = "/dev/shm"


@dataclass
class Traffic:
    """Bytes moved between the tiers since the start (counted when a copy is issued)."""
    host_to_device: int = 0
    device_to_host: int = 0

    @property
    def total(self) -> int:
        return self.host_to_device + self.device_to_host


class _DoneEvent:
    """An event that has already happened (CPU compute is synchronous)."""

    def done(self) -> bool:
        return True

    def result(self) -> None:
        return None


class Copier:
    """Asynchronous copies between the tiers on named lanes, ordered by events."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.traffic = Traffic()
        if self.device.type == "cuda":
            self._streams = {lane: torch.cuda.Stream(device=self.device) for lane in LANES}
        else:
            self._workers = {lane: ThreadPoolExecutor(1, thread_name_prefix=f"copy-{lane}") for lane in LANES}
            weakref.finalize(self, _shutdown, list(self._workers.values()))

    def copy(self, lane: str, dst: torch.Tensor, src: torch.Tensor, after: list = ()):
        """dst.copy_(src) on `lane` once every event in `after` has happened; returns its event."""
        nbytes = src.numel() * src.element_size()
        if lane.startswith("load"):
            self.traffic.host_to_device += nbytes
        else:
            self.traffic.device_to_host += nbytes
        if self.device.type == "cuda":
            stream = self._streams[lane]
            for event in after:
                stream.wait_event(event)
            with torch.cuda.stream(stream), torch.inference_mode():  # tensors made under inference mode too
                for t in (dst, src):  # used on another stream: keep the allocator from reusing them early
                    if t.is_cuda:
                        t.record_stream(stream)
                self._copy(dst, src)
                event = torch.cuda.Event()
                event.record(stream)
            return event
        return self._workers[lane].submit(_after_then, list(after), self._copy, dst, src)

    def _copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        for d, s in contiguous_pairs(dst, src):
            d.copy_(s, non_blocking=True)

    def wait(self, event) -> None:
        """Makes compute wait for `event` (CUDA: the compute stream waits, the host does not)."""
        if event is None:
            return
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).wait_event(event)
        else:
            event.result()  # host sync: the copy thread finishes (re-raises its error, if any)

    def record(self):
        """An event marking all compute issued so far (CPU: already done)."""
        if self.device.type == "cuda":
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(self.device))
            return event
        return _DoneEvent()

    def drain(self) -> None:
        """Waits for every lane (tests, shutdown)."""
        if self.device.type == "cuda":
            for stream in self._streams.values():
                stream.synchronize()  # host sync: only at teardown
        else:
            for worker in self._workers.values():
                worker.submit(lambda: None).result()


def _after_then(after: list, fn, *args) -> None:
    for event in after:
        event.result()
    with torch.inference_mode():  # this thread does not inherit the caller's mode; arenas may be inference tensors
        fn(*args)


def _shutdown(workers: list[ThreadPoolExecutor]) -> None:
    for worker in workers:
        worker.shutdown(wait=False)  # may run on a copy thread itself (GC), which cannot join itself


class HostTier:
    """Owns named shared-memory arenas; tensors allocated here live in the host tier.

    `prefix` names this tier's arenas (another process attaches to `<prefix>-<name>`). Arenas are
    unlinked when the tier is closed or the process exits."""

    def __init__(self, device: torch.device, prefix: str | None = None):
        self.device = torch.device(device)
        self.prefix = prefix or owned_prefix(uuid.uuid4().hex[:12])
        self.arenas: dict[str, shared_memory.SharedMemory] = {}
        self.tensors: dict[str, torch.Tensor] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)

    @property
    def bytes(self) -> int:
        return sum(a.size for a in self.arenas.values())

    def allocate(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A zeroed host-tier tensor named `name` (page-locked on CUDA machines)."""
        with self._lock:
            if name in self.arenas:
                raise ValueError(f"host tier {self.prefix!r} already has an arena named {name!r}")
            nbytes = max(1, math.prod(shape) * torch.empty(0, dtype=dtype).element_size())
            arena = shared_memory.SharedMemory(name=f"{self.prefix}-{name}", create=True, size=nbytes)
            _reserve(arena, nbytes, name)
            self.arenas[name] = arena
        tensor = _view(arena, shape, dtype)  # zeros: new shared memory reads as zeros
        if self.device.type == "cuda":
            _pin(tensor)
        self.tensors[name] = tensor
        return tensor

    def free(self, name: str) -> None:
        """Releases the arena `name` (its tensor must no longer be used)."""
        self._release(name)

    @staticmethod
    def attach(prefix: str, name: str, shape: tuple[int, ...], dtype: torch.dtype,
               device: torch.device | str = "cpu") -> tuple[torch.Tensor, shared_memory.SharedMemory]:
        """Maps an arena another process allocated; keep the returned SharedMemory alive with the tensor."""
        arena = open_segment(f"{prefix}-{name}")
        tensor = _view(arena, shape, dtype)
        if torch.device(device).type == "cuda":
            _pin(tensor)
        return tensor, arena

    def close(self) -> None:
        for name in list(self.arenas):
            self._release(name)

    def _release(self, name: str) -> None:
        arena = self.arenas.pop(name)
        tensor = self.tensors.pop(name, None)
        if tensor is not None and self.device.type == "cuda" and torch.cuda.is_available():
            torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())
        del tensor
        try:
            arena.close()
        except BufferError:  # a view still maps it; the mapping goes when the last view does
            pass
        try:
            arena.unlink()
        except FileNotFoundError:
            pass


def owned_prefix(tag: str) -> str:
    """triforce-pid<this pid>-<tag>: arenas named so are this process's, and remove_dead_segments
    removes them once this process is gone (a SIGKILL, a ray.kill)."""
    return f"{SEGMENT_PREFIX}{os.getpid()}-{tag}"


def open_segment(name: str) -> shared_memory.SharedMemory:
    """Maps an existing segment without registering it with this process's resource tracker: the
    owner alone decides when it goes (a tracked mapping would be unlinked when this process
    exits, deleting, say, the memory actor's weight arena when a shard exits)."""
    try:
        if sys.version_info >= (3, 13):
            return shared_memory.SharedMemory(name=name, track=False)
        arena = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        raise FileNotFoundError(f"no host-tier arena {name}: has its owner (the memory actor) allocated it on "
                                "this node?") from None
    # Python < 3.13 registers every mapped block with the tracker; take it back at once.
    resource_tracker.unregister(arena._name, "shared_memory")
    return arena


def remove_dead_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Removes the arenas whose owner process is dead (named triforce-pid<pid>-...); returns their names.
    Called when `triforce batch` and `triforce generate` start."""
    try:
        names = os.listdir(shm_dir)
    except OSError:   # no /dev/shm (not Linux): nothing of ours can be there
        return []
    removed = []
    for name in names:
        pid = _owner_pid(name)
        if pid is not None and not _alive(pid):
            try:
                os.unlink(os.path.join(shm_dir, name))
                removed.append(name)
            except OSError:   # gone already, or another user's: not ours to remove
                pass
    return removed


def _owner_pid(name: str) -> int | None:
    if not name.startswith(SEGMENT_PREFIX):
        return None
    head = name[len(SEGMENT_PREFIX):].split("-", 1)[0]
    return int(head) if head.isdigit() and 0 < int(head) < PID_MAX else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        return True
    return True


def _reserve(arena: shared_memory.SharedMemory, nbytes: int, name: str) -> None:
    """Backs the arena with memory now: a full /dev/shm then fails here with a clear error, instead
    of killing the process with SIGBUS when a copy first touches the missing pages."""
    fd = getattr(arena, "_fd", -1)
    if fd < 0 or not hasattr(os, "posix_fallocate"):
        return
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError as e:
        free = shutil.disk_usage("/dev/shm").free if os.path.isdir("/dev/shm") else 0
        arena.close()
        arena.unlink()
        raise UserError(f"the host tier cannot hold arena {name!r} of {nbytes / 2**30:.2f} GiB ({e.strerror}; "
                          f"/dev/shm has {free / 2**30:.2f} GiB free): raise the shared-memory size (Docker: "
                          "--shm-size; Ray: object_store_memory leaves room), or keep more layers on the device "
                          "(--on-chip-layers)") from None


def _view(arena: shared_memory.SharedMemory, shape, dtype) -> torch.Tensor:
    count = math.prod(shape)
    return torch.frombuffer(arena.buf, dtype=dtype, count=count).view(shape)


def _pin(tensor: torch.Tensor) -> None:
    """Page-locks a host tensor in place so host<->device copies are asynchronous DMA."""
    nbytes = tensor.numel() * tensor.element_size()
    err = torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), nbytes, 0)
    if int(err) != 0:
        raise RuntimeError(f"cudaHostRegister of {nbytes} bytes failed (error {int(err)}): raise the locked-memory "
                           "limit (ulimit -l) or lower the host tier's size")


def contiguous_pairs(dst: torch.Tensor, src: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """dst and src split along their leading dimensions until each pair is contiguous: positions
    [a, b) of a [B, Hkv, S, D] cache are B * Hkv contiguous runs. torch copies a non-contiguous
    host tensor to a GPU by first making a pageable contiguous copy on the host, synchronously
    (the KV stream ran at 9 GB/s of a 55 GB/s link, BENCHMARKS "GPU"); runs copy directly."""
    if (dst.is_contiguous() and src.is_contiguous()) or dst.dim() <= 1 or dst.stride(-1) != 1 or src.stride(-1) != 1:
        return [(dst, src)]   # whole, or rows that no split makes contiguous (a transposed view): one copy
    return [pair for d, s in zip(dst, src, strict=True) for pair in contiguous_pairs(d, s)]
