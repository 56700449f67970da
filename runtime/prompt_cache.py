"""`triforce generate --prompt-cache PATH`: a prompt's prefill kept in a file from one process to the
next (as llama.cpp's --prompt-cache), so that another question over the same document copies the
document's KV instead of computing it. Before the request, PATH's prefill becomes the engine's saved
one (Engine.import_prefill), and the request copies the positions its prompt shares with it in whole
prefill passes, bit for bit what its own passes would write (Engine._saved_prefill); after it, PATH
holds this request's prompt (written beside it, fsynced, then renamed into place).

A file made by another model, dtype, RoPE scaling, machine or native build is not used (one line
says which setting differs) and is replaced; a file that is not a prompt cache is refused, untouched.
File: torch.save of {"format", "key", "tokens", "chunk", "k", "v", "last_query"}, k/v [L, 1, Hkv, n, D].
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

from triforce.runtime.durable import fsync_dir
from triforce.runtime.errors import UserError

FORMAT = "triforce prompt cache 1"


def cache_key(engine) -> dict:
    """What the saved K/V's bits depend on besides the tokens and the pass size."""
    from triforce.runtime.gamma import machine_fingerprint   # CPU, GPU, torch and the native sources
    return dict(model=str(Path(engine.model_dir).resolve()), dtype=str(engine.dtype),
                rope_scaling=repr(engine.cfg.rope_scaling), machine=machine_fingerprint())


def load_prompt_cache(engine, path: Path, chunk: int) -> int:
    """Makes PATH's prefill the engine's saved one; returns its tokens (0: no file, or made under
    other settings, which one stderr line names). chunk: this run's prefill pass size."""
    if not path.exists():
        return 0
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
        ok = isinstance(data, dict) and data.get("format") == FORMAT
    except Exception as e:   # noqa: BLE001 -- any unreadable file: refused with its reason
        ok, data = False, e
    if not ok:
        reason = f" ({type(data).__name__}: {str(data).splitlines()[0][:200]})" if isinstance(data, Exception) else ""
        raise UserError(f"--prompt-cache {str(path)!r} is not a triforce prompt cache{reason}; pass a new path, "
                        "or delete the file if it is an old one")
    key = dict(cache_key(engine), prefill_chunk=chunk)
    differ = [name for name in key if {**data["key"], "prefill_chunk": data["chunk"]}.get(name) != key[name]]
    if differ:
        print(f"triforce: --prompt-cache {str(path)!r} was made with another {', '.join(differ)}; prefilling "
              "from scratch (the file will hold this prompt)", file=sys.stderr, flush=True)
        return 0
    engine.import_prefill(data["tokens"], data["chunk"], data["k"], data["v"], data["last_query"])
    return len(data["tokens"])


def save_prompt_cache(engine, path: Path) -> None:
    """Writes the engine's saved prefill to PATH (beside it first, then renamed): all or nothing."""
    saved = engine.export_prefill()
    if saved is None:
        return
    tokens, chunk, k, v, last_query = saved
    data = dict(format=FORMAT, key=cache_key(engine), tokens=tokens, chunk=chunk, k=k.cpu(), v=v.cpu(),
                last_query=last_query.cpu())
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:   # (our own open: a missing directory is an OSError, not torch's RuntimeError)
            torch.save(data, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write --prompt-cache {str(path)!r}: {e.strerror or e}; pass a writable path") from None
