"""Files written so that a reader never sees half of them: one file (`atomic_write`) or a whole
directory (`building`, swapped in by `swap_in`, repaired by `recover_dir`), and the one progress
line of the project (`ProgressLine`, with `clock` for its durations). A leaf module (rule 11).
"""
from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from triforce.runtime.durable import check_ready, fsync_dir, write_ready
from triforce.runtime.errors import UserError


def atomic_write(path: Path, write: Callable, mode: int = 0o644) -> None:
    """Writes `path` through write(binary file object) into a temp file beside it, fsyncs it, renames
    it over `path` and fsyncs the directory (atomic and durable: readers and concurrent writers of
    the same bytes never see a torn file, nor a crash an empty one). OSError passes through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)   # mkstemp makes it owner-only; caches and checkpoints are shared
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _fresh_dir(near: Path) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{near.name}.tmp-", dir=near.parent))
    os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; a checkpoint is an ordinary shared dir
    return tmp


def swap_in(tmp: Path, out: Path) -> None:
    """Replace directory `out` by `tmp` as atomically as POSIX allows: rename over it via a side
    name (a directory cannot be renamed onto a non-empty one). Files in `out` that `tmp` lacks (a
    log, notes) move over. A crash between the renames leaves `.{out}.old-*`, which
    recover_dir() puts back."""
    if not out.exists():
        os.replace(tmp, out)
        return
    for entry in out.iterdir():
        if not (tmp / entry.name).exists():
            os.replace(entry, tmp / entry.name)  # same filesystem: open files keep being written
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    os.replace(out, old)
    os.replace(tmp, out)
    shutil.rmtree(old, ignore_errors=True)


@contextmanager
def building(out: Path) -> Iterator[Path]:
    """A fresh temp dir beside `out` to write into; on success its files are made world-readable,
    fsynced, hashed into READY.json and verified, and it is swapped in for `out`; on any failure it
    is removed."""
    tmp = _fresh_dir(out)
    try:
        yield tmp
        for file in tmp.iterdir():
            file.chmod(0o644)
        write_ready(tmp)
        problem = check_ready(tmp, full=True)
        if problem:
            raise UserError(f"{str(tmp)!r} does not verify after writing ({problem}); run again")
        swap_in(tmp, out)
        fsync_dir(out.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def recover_dir(out: Path) -> None:
    """Undo what a killed writer left: temp dirs, or `out` missing with its previous version aside."""
    for stale in out.parent.glob(f".{out.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    olds = sorted(out.parent.glob(f".{out.name}.old-*"))
    if olds and not out.exists():
        os.replace(olds[-1], out)
        olds = olds[:-1]
    for old in olds:
        shutil.rmtree(old, ignore_errors=True)


class ProgressLine:
    """A status line on stderr: redrawn in place on a terminal; in a log file, a plain line at
    most every `every_s` seconds (and whenever `force`)."""

    def __init__(self, stream=None, every_s: float = 30.0):
        self.stream = stream or sys.stderr
        self.tty, self.every_s, self.last, self.width = self.stream.isatty(), every_s, -math.inf, 0

    def show(self, text: str, force: bool = False) -> None:
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        elif force or time.monotonic() - self.last >= self.every_s:
            self.stream.write(text + "\n")
            self.last = time.monotonic()
        self.stream.flush()

    def close(self) -> None:
        """Ends a redrawn line, so that what is printed next starts on its own line."""
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()
            self.width = 0


def clock(seconds: float) -> str:
    """A duration for a status line: 1h05m, 4m07s; "-" when unknown (inf, nan)."""
    if not math.isfinite(seconds):
        return "-"
    seconds = max(0, int(seconds))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"
