"""Durable files: fsync before rename, fsync of the directory after, and a READY manifest (sizes
and SHA-256 of every file) written last, so that a directory is called ready only once every
byte of it is on disk and checks out. A leaf module: used by assets, distill checkpoints and batch.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path

from triforce.runtime.errors import UserError

READY = "READY.json"   # the manifest a prepared directory ends with


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Makes the names in `path` (a rename, a new file) durable."""
    fsync_file(path)


def fsync_tree(root: Path) -> None:
    """Every file under root, then every directory, bottom up."""
    for dirpath, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_file(Path(dirpath) / name)
        fsync_dir(Path(dirpath))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_ready(root: Path) -> dict:
    """Hashes every file under root (fsynced first) and writes READY.json last; returns it."""
    fsync_tree(root)
    files = {str(p.relative_to(root)): {"bytes": p.stat().st_size, "sha256": sha256_of(p)}
             for p in sorted(root.rglob("*")) if p.is_file() and p.name != READY}
    manifest = {"files": files}
    path = root / READY
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    fsync_file(path)
    fsync_dir(root)
    return manifest


def check_ready(root: Path, full: bool = False) -> str | None:
    """None if root's READY.json matches its files (sizes; with full, hashes too), else what is
    wrong, in words."""
    try:
        manifest = json.loads((root / READY).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"no valid {READY} ({type(e).__name__})"
    for name, want in files.items():
        path = root / name
        try:
            size = path.stat().st_size
        except OSError:
            return f"{name} is missing"
        if size != want["bytes"]:
            return f"{name} has {size} bytes, expected {want['bytes']}"
        if full and sha256_of(path) != want["sha256"]:
            return f"{name} does not match its SHA-256"
    return None


def not_writable(directory: Path, error: OSError, variable: str | None = None) -> UserError:
    """One line for a directory we cannot write: read-only, no permission, or full."""
    if error.errno == errno.ENOSPC:
        return UserError(f"disk full writing in {str(directory)!r}; free space and run again")
    hint = f"; set ${variable} to a writable directory" if variable else ""
    return UserError(f"cannot write in {str(directory)!r} ({error.strerror}){hint}")
