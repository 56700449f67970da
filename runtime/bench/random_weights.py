"""Checkpoints of an architecture with random weights, for timing only (`--model FILE.json`).

A pass's cost depends on the shapes, never on the values, so the paper's targets
(configs/models/llama2-7b-128k.json, the 68M drafter configs/models/llama-68m.json) can be timed
on a machine that has no copy of their weights. Never use these for acceptance or quality: the
suites that take them say "random weights" in their report.

The checkpoint is an ordinary directory (config.json, model.safetensors, a tokenizer), written
once under $TRIFORCE_CACHE/random/ and reused. Its tokenizer is a word-level one whose tokens
are "t0" .. "t{V-1}", so two configs with the same vocabulary size get the same tokenizer (a
drafter and its target), and prompts are random token ids (`random_ids`), not text.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch

from triforce.runtime.config import model_config_from_dict
from triforce.runtime.errors import UserError

MARK = "RANDOM_WEIGHTS"  # present in every checkpoint written here
STD = 0.02               # Llama's initializer range


def is_random(model_dir: str | Path | None) -> bool:
    return model_dir is not None and (Path(model_dir) / MARK).is_file()


def random_ids(vocab_size: int, tokens: int, seed: int = 0) -> list[int]:
    """A prompt for a random-weight model: `tokens` ids drawn uniformly (the values do not change a pass's cost)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab_size, (tokens,), generator=g).tolist()


def model_arg(value: str | None) -> str | None:
    """--model / --draft-model as given, or, for an architecture-only config file (*.json), the
    random-weight checkpoint of that shape (written on first use)."""
    if value is None or not value.endswith(".json"):
        return value
    path = Path(value).expanduser()
    if not path.is_file():
        raise UserError(f"--model {value!r}: no such config file; pass a checkpoint directory, or a config.json "
                        "of an architecture (e.g. configs/models/llama2-7b-128k.json) to time random weights")
    out = random_checkpoint(path)
    print(f"[bench] {value}: random weights (timing only), {out}", flush=True)
    return str(out)


def random_checkpoint(config_file: Path, seed: int = 0) -> Path:
    """The directory of a checkpoint of `config_file`'s architecture with random bf16 weights."""
    from triforce.runtime.assets import cache_dir

    raw = config_file.read_bytes()
    try:
        config = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{str(config_file)!r} is not valid JSON ({e}); pass a model's config.json") from None
    model_config_from_dict(config, str(config_file))      # a file that is no model's config: one line, before any write
    key = hashlib.sha256(raw + f"seed={seed}".encode()).hexdigest()[:12]
    out = cache_dir() / "random" / f"{config_file.stem}-{key}"
    if is_random(out):
        return out
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        write_random_weights(tmp, seed)
        write_word_tokenizer(tmp, int(config["vocab_size"]))
        (tmp / MARK).write_text(f"random weights (std {STD}, seed {seed}) of {config_file}: for timing only\n")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)   # no half-written checkpoint left behind (a full disk, Ctrl-C)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def write_random_weights(model_dir: Path, seed: int) -> None:
    """model.safetensors with every tensor the model loads: norms 1, matrices N(0, STD^2), bf16
    (drawn on the GPU when there is one: billions of draws)."""
    from safetensors.torch import save_file

    from triforce.runtime.config import ModelConfig
    from triforce.runtime.model import Transformer

    cfg = ModelConfig.from_dir(model_dir)
    with torch.device("meta"):
        shapes = {name: t.shape for name, t in Transformer(cfg).state_dict().items()}
    if cfg.tie_word_embeddings:
        shapes.pop("lm_head.weight", None)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device).manual_seed(seed)
    state = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            state[name] = torch.ones(shape, dtype=torch.bfloat16)       # norm weights (and any bias: 1 is harmless)
        else:
            state[name] = (torch.randn(shape, generator=g, device=device) * STD).to(torch.bfloat16).cpu()
    save_file(state, str(model_dir / "model.safetensors"))


def write_word_tokenizer(model_dir: Path, vocab_size: int) -> None:
    """A word-level tokenizer over "t0" .. "t{V-1}" (the same file for every config of this vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab_size)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t0"}))
