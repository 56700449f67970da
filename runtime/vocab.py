"""Token frequencies of the distillation corpus, for a drafter head pruned to the N most frequent
tokens (--draft-vocab N). `triforce distill` records them beside the drafter's weights
(token_counts.npy); for a drafter without them, the embedded KJV is counted once per
tokenizer and cached under the asset cache directory (a [V] int64 tensor, written atomically)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

import numpy as np
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import atomic_write

COUNTS_FILE = "token_counts.npy"   # [V] int32: a drafter's distillation corpus, counted (not *.safetensors:
                                   # weight loaders read every such file of a checkpoint)


def write_token_counts(directory: Path, tokens: torch.Tensor, vocab_size: int) -> None:
    """How often each id occurs in `tokens` [N] (the corpus a drafter was distilled on) -> directory/COUNTS_FILE."""
    counts = torch.bincount(tokens.long(), minlength=vocab_size)[:vocab_size]
    np.save(Path(directory) / COUNTS_FILE, counts.numpy().astype(np.int32), allow_pickle=False)


def drafter_token_counts(draft_dir: Path | None, tokenizer, vocab_size: int) -> torch.Tensor:
    """The frequencies a drafter's pruned head keeps the top of -> [V] int64: those its distillation
    recorded beside its weights, else the embedded KJV's (what drafters without a record were distilled on)."""
    path = Path(draft_dir) / COUNTS_FILE if draft_dir is not None else None
    if path is None or not path.is_file():
        return corpus_token_counts(tokenizer, vocab_size)
    counts = torch.from_numpy(np.load(path, allow_pickle=False).astype(np.int64))
    if counts.shape != (vocab_size,):
        raise UserError(f"{str(path)!r} counts {tuple(counts.shape)} token ids, the target's vocabulary has "
                        f"{vocab_size}; delete it (then the KJV's frequencies are used) or re-export the drafter")
    return counts


def _cache_path(tokenizer, corpus: str, text: str) -> Path:
    from triforce.runtime.assets import cache_dir
    key = hashlib.sha256(json.dumps(sorted(tokenizer.get_vocab().items())).encode()).hexdigest()[:16]
    text_key = hashlib.sha256(text.encode()).hexdigest()[:16]
    return cache_dir() / "token-counts" / f"{corpus}-{key}-{text_key}.pt"


def corpus_token_counts(tokenizer, vocab_size: int, corpus: str = "kjv") -> torch.Tensor:
    """How often each token id occurs in the corpus (default: the embedded KJV, the distillation
    corpus of the embedded drafter) -> [V] int64. The first call tokenizes the text (~1M tokens:
    seconds); later calls read the cache."""
    if corpus != "kjv":
        raise UserError(f"draft vocabulary corpus {corpus!r} is not known; only 'kjv' (the embedded text)")
    from triforce.runtime.assets import kjv_text
    text = kjv_text()
    path = _cache_path(tokenizer, corpus, text)
    if path.exists():
        counts = torch.load(path)
        if counts.shape == (vocab_size,):
            return counts
    lines = [line for line in text.splitlines() if line.strip()]
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for start in range(0, len(lines), 4096):
        ids = tokenizer(lines[start:start + 4096], add_special_tokens=False)["input_ids"]
        flat = torch.tensor([i for row in ids for i in row], dtype=torch.int64)
        counts += torch.bincount(flat, minlength=vocab_size)[:vocab_size]
    atomic_write(path, lambda f: torch.save(counts, f))   # a concurrent reader sees all or nothing
    return counts


def kept_token_ids(counts: torch.Tensor, n: int, always: list[int]) -> torch.Tensor:
    """The n ids a pruned head keeps: `always` (special tokens: EOS, chat markers) plus the most
    frequent others (ties by lower id), sorted -> [n] int64."""
    V = counts.shape[0]
    if not 0 < n <= V:
        raise UserError(f"draft_vocab {n} must be between 1 and the vocabulary size {V} (0 = the full vocabulary)")
    always = sorted({i for i in always if 0 <= i < V})[:n]
    rank = counts.double() - torch.arange(V, dtype=torch.float64) / V   # ties: lower id first
    rank[always] = float("inf")
    return rank.topk(n).indices.sort().values
