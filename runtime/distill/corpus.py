"""The corpus: UTF-8 text -> token ids (cached per tokenizer and text) -> the training tokens and
the held-out windows of its tail; random training windows."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from triforce.runtime import assets
from triforce.runtime.distill.config import DistillConfig
from triforce.runtime.engine import load_tokenizer
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import atomic_write

def read_corpus(corpus: str | None) -> str:
    if corpus is None:
        return assets.kjv_text()
    path = Path(corpus).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except (FileNotFoundError, IsADirectoryError):
        what = "is a directory" if path.is_dir() else "does not exist"
        raise UserError(f"--corpus {str(path)!r} {what}; pass a UTF-8 text file "
                        "(or omit --corpus for the embedded King James Bible)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read --corpus {str(path)!r} as UTF-8 text ({e}); pass a UTF-8 text file") from None


def _tokenizer_key(target_dir: Path) -> bytes:
    digest = hashlib.sha256()
    for name in ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json"):
        if (target_dir / name).is_file():
            digest.update(name.encode() + b"\0" + (target_dir / name).read_bytes())
    return digest.digest()


def corpus_tokens(target_dir: Path, corpus: str | None) -> torch.Tensor:
    """All token ids of the corpus, [N] int64, cached in cache_dir()/distill keyed by
    tokenizer + text (tokenizing the 4.3M-character KJV takes seconds, every run)."""
    text = read_corpus(corpus)
    key = hashlib.sha256(_tokenizer_key(target_dir) + text.encode("utf-8")).hexdigest()[:20]
    path = assets.cache_dir() / "distill" / f"tokens-{key}.npy"
    if path.is_file():
        return torch.from_numpy(np.load(path).astype(np.int64))
    tokenizer = load_tokenizer(target_dir)
    # verbose=False: the whole corpus is longer than model_max_length on purpose.
    ids = np.asarray(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"], dtype=np.int32)
    atomic_write(path, lambda f: np.save(f, ids))  # concurrent runs write the same bytes
    return torch.from_numpy(ids.astype(np.int64))


@dataclass(frozen=True)
class Corpus:
    train: torch.Tensor       # [N_train] token ids training windows are sampled from
    held_out: torch.Tensor    # [W, T] fixed evaluation windows from the corpus' tail
    held_out_start: int       # index of the first held-out token in the whole corpus
    total: int                # tokens in the whole corpus
    source: str               # what the tokens are, for reports


def split_corpus(tokens: torch.Tensor, cfg: DistillConfig, source: str) -> Corpus:
    """Train = everything before the last held_out_fraction of tokens; held-out = evenly spaced
    windows of that tail (at least one window's worth is held out)."""
    n, T = len(tokens), cfg.seq_len
    held = max(int(n * cfg.held_out_fraction), T)
    if n - held < T + 1:
        raise UserError(f"corpus {source} has {n} tokens; distillation needs at least {T + 1 + held} "
                        f"({T}-token training windows plus a held-out tail of {held}); "
                        "pass a longer --corpus or a smaller --seq-len")
    tail = tokens[n - held:]
    count = min(cfg.eval_windows, held // T)
    starts = torch.linspace(0, held - T, count).long()
    windows = torch.stack([tail[s:s + T] for s in starts.tolist()])  # [W, T]
    return Corpus(train=tokens[:n - held], held_out=windows, held_out_start=n - held, total=n, source=source)


def sample_windows(train: torch.Tensor, batch: int, T: int, gen: torch.Generator) -> torch.Tensor:
    """B random windows of T tokens -> [B, T] int64 (on the CPU)."""
    starts = torch.randint(0, len(train) - T + 1, (batch,), generator=gen)
    return train[starts[:, None] + torch.arange(T)]
