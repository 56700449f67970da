"""The drafter of the embedded target: stored compact in the repo (drafters/NAME/: its own
layers in bf16 + a drafter.json manifest), assembled on first use into a complete checkpoint by
adding the tensors it shares with its target (embeddings; lm_head when untied) and the target's
tokenizer files. `triforce distill` (runtime/distill/) makes such drafters; the engine and the
planner only need this module.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from triforce.runtime.config import ModelConfig
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import building, recover_dir
from triforce.runtime.model import checkpoint_files
from triforce.runtime.vocab import COUNTS_FILE

# Files copied from the target so a drafter directory is a complete Hugging Face checkpoint.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "special_tokens_map.json", "tokenizer_config.json", "chat_template.jinja",
                   "generation_config.json")
# Tensors the student takes from the target and never trains (lm_head only when untied).
SHARED_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")

DEFAULT_BASE = "smollm2-135m-instruct"                       # the embedded target (assets.MODEL_DIR_NAME)
DRAFTERS_DIR = Path(__file__).resolve().parent.parent / "drafters"  # compact drafters stored in the repo


def copy_tokenizer_files(source: Path, dest: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)


def _tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over names and fp32 bytes: identifies the target's shared tensors across files."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        digest.update(name.encode() + b"\0")
        digest.update(tensors[name].float().contiguous().numpy().tobytes())
    return digest.hexdigest()


def read_tensors(model_dir: Path, names: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    tensors = {}
    for path in checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                if names(name):
                    tensors[name] = f.get_tensor(name)
    return tensors


def drafter_config(target_raw: dict, layers: int, dtype: str) -> dict:
    """The target's config.json cut to `layers` decoder layers (per-layer lists trimmed)."""
    raw = dict(target_raw, num_hidden_layers=layers)
    if isinstance(raw.get("layer_types"), list):
        raw["layer_types"] = raw["layer_types"][:layers]
    if "max_window_layers" in raw:
        raw["max_window_layers"] = min(raw["max_window_layers"], layers)
    raw["torch_dtype" if "torch_dtype" in raw and "dtype" not in raw else "dtype"] = dtype
    return raw


def assemble_drafter(compact_dir: Path, target_dir: Path, out_dir: Path, manifest: bool = True) -> None:
    """A self-contained fp32 checkpoint in out_dir (new or empty): the compact drafter's
    tensors + the shared ones read from the target + the target's tokenizer files."""
    compact_dir, target_dir = Path(compact_dir), Path(target_dir)
    own = read_tensors(compact_dir, lambda name: True)
    info = json.loads((compact_dir / "drafter.json").read_text()) if manifest else None
    shared_names = info["shares"] if info else [n for n in SHARED_TENSORS if n == "model.embed_tokens.weight"
                                                 or not ModelConfig.from_dir(compact_dir).tie_word_embeddings]
    shared = read_tensors(target_dir, lambda name: name in shared_names)
    if sorted(shared) != sorted(shared_names):
        raise UserError(f"target {str(target_dir)!r} lacks {sorted(set(shared_names) - set(shared))}, which the "
                        f"drafter in {str(compact_dir)!r} shares; pass the target it was distilled from")
    if info and _tensor_digest(shared) != info["shared_sha256"]:
        # Not fatal: a re-converted target may differ in the last bits; agreement may then differ.
        print(f"[distill] warning: {target_dir}'s {', '.join(shared_names)} differ from those the drafter in "
              f"{compact_dir} was trained with; its recorded agreement may not hold", file=sys.stderr)
    out_dir.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.float().contiguous() for k, v in (own | shared).items()}
    save_file(tensors, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    config = json.loads((compact_dir / "config.json").read_text())
    config = drafter_config(config, config["num_hidden_layers"], "float32")
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    copy_tokenizer_files(target_dir, out_dir)
    if (compact_dir / COUNTS_FILE).is_file():
        shutil.copyfile(compact_dir / COUNTS_FILE, out_dir / COUNTS_FILE)
    if info:
        shutil.copyfile(compact_dir / "drafter.json", out_dir / "drafter.json")


def _drafter_ready(path: Path, manifest: bytes) -> bool:
    """Assembled from exactly this repo version (drafter.json carries the weights' hash)."""
    return (path / "model.safetensors").is_file() and (path / "config.json").is_file() and \
        (path / "drafter.json").is_file() and (path / "drafter.json").read_bytes() == manifest


def default_drafter_dir() -> Path:
    """The drafter for the embedded target, assembled on first use into
    cache_dir()/models/smollm2-135m-instruct-drafter from drafters/smollm2-135m-instruct/ (its own
    layers, bf16) + the target's embeddings; atomic, idempotent, re-assembled when the repo's
    drafter changes."""
    from triforce.runtime.assets import _locked, cache_dir, default_model_dir  # at call time: tests replace them
    compact = DRAFTERS_DIR / DEFAULT_BASE
    if not (compact / "drafter.json").is_file():
        raise UserError(f"the default drafter is missing from {compact}; reinstall from a full checkout, or "
                        "distill one with `triforce distill` and pass --draft-model DIR")
    manifest = (compact / "drafter.json").read_bytes()
    target = cache_dir() / "models" / f"{DEFAULT_BASE}-drafter"
    if _drafter_ready(target, manifest):
        return target
    base = default_model_dir()
    with _locked(target.parent / f".{target.name}.lock"):
        if _drafter_ready(target, manifest):  # another process finished while we waited
            return target
        recover_dir(target)   # we hold the lock: temp dirs here are killed assemblers'
        with building(target) as tmp:  # replaces a stale one (an older repo drafter) too
            assemble_drafter(compact, base, tmp)
    return target
