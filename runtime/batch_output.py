"""`triforce batch`, output: one locked, durable JSONL file with a manifest beside it.

    OUTPUT.lock            flock held for the whole job; holds the holder's pid, host and start time
    OUTPUT.manifest.json   the input's fingerprint and the settings that decide the results
    OUTPUT                 one whole JSON line per finished record, flushed and fsynced

Order on --resume: lock, compare the manifest, parse every whole line, and only then cut a torn
last line (a kill mid-write): nothing is truncated before the file is known to be ours.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import socket
import time
from pathlib import Path

from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import atomic_write

MANIFEST_VERSION = 1


def sidecar(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def write_atomic(path: Path, data: bytes) -> None:
    """data at path, all or nothing and durable; a failure is one line (disk full: --resume)."""
    try:
        atomic_write(path, lambda f: f.write(data))
    except OSError as e:
        raise _write_error(path, e) from None


def _write_error(path: Path, e: OSError) -> UserError:
    if e.errno == errno.ENOSPC:
        return UserError(f"disk full writing {str(path)!r}; free space, then rerun the same command with --resume "
                         "(every record written so far is kept)")
    return UserError(f"cannot write {str(path)!r}: {e.strerror}")


# ----------------------------------------------------------------------------------------- lock
class OutputLock:
    """An exclusive flock on OUTPUT.lock for the life of the job. A second job on the same output
    stops at once, naming the holder. The lock file is never deleted (deleting it would let a
    third job lock a fresh inode while the second still holds the old one)."""

    def __init__(self, output: Path):
        self.path = sidecar(output, ".lock")
        try:
            output.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise _write_error(self.path, e) from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 4096, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(self.fd)
            raise UserError(f"output {str(output)!r} is in use by another job ({holder}); wait for it to finish "
                            "or choose another --output") from None
        note = f"triforce batch pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}"
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, note.encode(), 0)

    def release(self) -> None:
        if self.fd is not None:
            os.ftruncate(self.fd, 0)
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# ------------------------------------------------------------------------------------- manifest
def manifest_for(input_path: Path, input_bytes: bytes, settings: dict) -> dict:
    return {"version": MANIFEST_VERSION, "tool": "triforce batch",
            "input": {"path": str(input_path.resolve()), "bytes": len(input_bytes),
                      "sha256": hashlib.sha256(input_bytes).hexdigest()},
            "settings": settings}


def manifest_differences(old: dict, new: dict) -> list[str]:
    """What changed between the manifest on disk and this run's, one phrase per difference."""
    out = []
    if old.get("input", {}).get("sha256") != new["input"]["sha256"]:
        out.append(f"the input's content (sha256 {str(old.get('input', {}).get('sha256'))[:12]}... -> "
                   f"{new['input']['sha256'][:12]}...)")
    before, after = old.get("settings", {}), new["settings"]
    for key in sorted(set(before) | set(after)):
        if before.get(key) != after.get(key):
            out.append(f"{key} {before.get(key)!r} -> {after.get(key)!r}")
    return out


# --------------------------------------------------------------------------------------- output
class OutputFile:
    """Append-only JSONL of finished records. A record counts as done once its whole line is
    written, flushed and fsynced; nothing else ever writes the file while the lock is held.

    done: the records that this run skips. On --resume: every record, except error records marked
    retryable (a replica died, a deadline passed) and, with retry_errors, every error record; those
    are removed from the file (rewritten atomically) so that each id appears exactly once."""

    def __init__(self, path: Path, resume: bool, manifest: dict | None = None, retry_errors: bool = False):
        self.path, self.done, self.manifest_path = path, {}, sidecar(path, ".manifest.json")
        self.lock = OutputLock(path)
        try:
            self._open(resume, manifest, retry_errors)
        except BaseException:
            self.lock.release()
            raise

    def _open(self, resume: bool, manifest: dict | None, retry_errors: bool) -> None:
        exists = self.path.exists() and self.path.stat().st_size > 0
        if exists and not resume:
            raise UserError(f"output {str(self.path)!r} already exists; pass --resume to continue that job, or "
                            "choose another --output")
        if exists:
            if manifest is not None:
                self._check_manifest(manifest)
            records, whole = self._read_records()
            self._cut_torn_tail(whole)
            kept = {i: r for i, r in records.items() if not _rerun(r, retry_errors)}
            if len(kept) < len(records):
                self._rewrite(kept)
            self.done = kept
        if manifest is not None:   # before any record: the file is ours from its first line
            write_atomic(self.manifest_path, (json.dumps(manifest, indent=1) + "\n").encode())
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as e:
            raise _write_error(self.path, e) from None

    def _check_manifest(self, manifest: dict) -> None:
        if not self.manifest_path.exists():
            return   # an output of an older version: _read_records still checks every line is a record
        try:
            old = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise UserError(f"manifest {str(self.manifest_path)!r} is unreadable ({e}); it cannot be resumed "
                            "(move the output away and start again)") from None
        if not isinstance(old, dict) or old.get("tool") != "triforce batch":
            raise UserError(f"{str(self.manifest_path)!r} is not a triforce batch manifest; it cannot be resumed")
        changed = manifest_differences(old, manifest)
        if changed:
            raise UserError(f"--resume with other settings than {str(self.path)!r} was made with: "
                            f"{'; '.join(changed)}; rerun with the original settings, or choose another --output")

    def _read_records(self) -> tuple[dict, int]:
        """(records by id, bytes of whole lines); UserError if a whole line is not one of ours.
        Reads only: nothing is cut here."""
        data = self.path.read_bytes()
        whole = data.rfind(b"\n") + 1
        records = {}
        for n, raw in enumerate(data[:whole].split(b"\n")[:-1], start=1):
            try:
                record = json.loads(raw)
                ours = isinstance(record, dict) and isinstance(record.get("id"), str) and \
                    record.get("status") in ("ok", "error")
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError, ValueError):
                ours = False
            if not ours:
                raise UserError(f"output {str(self.path)!r} line {n} is not a record of triforce batch; it cannot "
                                "be resumed (move it away and start again); the file was not changed")
            records[record["id"]] = record
        if whole < len(data) and whole == 0 and not self.manifest_path.exists():
            raise UserError(f"output {str(self.path)!r} holds no whole record and no manifest; it is not a "
                            "triforce batch output (move it away and start again); the file was not changed")
        return records, whole

    def _cut_torn_tail(self, whole: int) -> None:
        """A kill mid-write leaves a torn last line: cut it (the lock guarantees no writer is live)."""
        if whole < self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(whole)
                os.fsync(f.fileno())

    def _rewrite(self, kept: dict) -> None:
        """The file with only the kept records, in their order, replaced atomically."""
        lines = b"".join(encode_line(r) for r in kept.values())
        write_atomic(self.path, lines)

    def append(self, record: dict) -> None:
        line = encode_line(record)
        size = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            view = memoryview(line)
            while view:  # one write for any sane line; a kill between writes leaves a torn line, cut on resume
                view = view[os.write(self.fd, view):]
            os.fsync(self.fd)
        except OSError as e:
            try:
                os.ftruncate(self.fd, size)   # no half line left behind: the file stays resumable
            except OSError:
                pass   # the torn line is cut by --resume
            raise _write_error(self.path, e) from None
        self.done[record["id"]] = record

    def close(self) -> None:
        if getattr(self, "fd", None) is not None:
            os.close(self.fd)
            self.fd = None
        self.lock.release()


def encode_line(record: dict) -> bytes:
    """One JSON line. backslashreplace: a lone surrogate that slipped into a message is written as
    its JSON escape, never an exception that would lose the record."""
    return (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8", "backslashreplace")


def _rerun(record: dict, retry_errors: bool) -> bool:
    return record.get("status") != "ok" and (retry_errors or bool(record.get("retryable")))
