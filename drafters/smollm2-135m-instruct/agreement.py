"""The agreement table of README.md: top-1 agreement and temperature-1 acceptance of drafters with
the embedded target on three texts, and how much of each text their --draft-vocab 4096 head covers.

    python drafters/smollm2-135m-instruct/agreement.py DRAFTER_DIR [DRAFTER_DIR ...]

(the embedded drafter, assembled: <cache>/models/smollm2-135m-instruct-drafter). Texts, 16
windows of 256 tokens each: the KJV's last 2% (stage 1's held-out), the essays' first 32K tokens
(the benchmarks' prompts, never trained on), and the tail of make_corpus.py's text (stage 2's
held-out, 13 windows).
"""
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

from triforce.runtime import assets
from triforce.runtime.distill.corpus import corpus_tokens
from triforce.runtime.distill.student import held_out_metrics
from triforce.runtime.engine import load_tokenizer, resolve_model_dir
from triforce.runtime.model import load_model
from triforce.runtime.vocab import drafter_token_counts, kept_token_ids

T = 256


def windows(tokens: torch.Tensor, start: int, n: int = 16) -> torch.Tensor:
    """n evenly spaced windows of T tokens from tokens[start:] -> [n, T]."""
    tail = tokens[start:]
    return torch.stack([tail[s:s + T] for s in torch.linspace(0, len(tail) - T, n).long().tolist()])


def texts(target_dir: Path) -> dict[str, torch.Tensor]:
    tokenizer = load_tokenizer(target_dir)
    kjv = corpus_tokens(target_dir, None)
    essays = torch.tensor(tokenizer(assets.essays_text()[:200_000], add_special_tokens=False)["input_ids"][:32768])
    spec = importlib.util.spec_from_file_location("make_corpus", Path(__file__).with_name("make_corpus.py"))
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    with tempfile.TemporaryDirectory() as tmp:
        make_corpus.main(str(Path(tmp) / "general.txt"))
        general = corpus_tokens(target_dir, str(Path(tmp) / "general.txt"))
    return {"the KJV's last 2%": windows(kjv, len(kjv) - int(len(kjv) * 0.02)),
            "the essays' first 32K tokens": windows(essays, 0),
            "stage 2's held-out tail": windows(general, len(general) - max(int(len(general) * 0.02), T), n=13)}


def main(drafters: list[str]) -> None:
    target_dir = resolve_model_dir(None)
    teacher, tokenizer = load_model(target_dir), load_tokenizer(target_dir)
    sets = texts(target_dir)
    for drafter in map(Path, drafters):
        student = load_model(drafter)
        counts = drafter_token_counts(drafter, tokenizer, teacher.cfg.vocab_size)
        kept = torch.zeros(teacher.cfg.vocab_size, dtype=torch.bool)
        kept[kept_token_ids(counts, 4096, list(tokenizer.all_special_ids))] = True
        for name, w in sets.items():
            m = held_out_metrics(student, teacher, w)
            print(f"{drafter}: {name}: agreement {m['agreement']:.3f}, accept rate {m['accept_rate']:.3f}, "
                  f"--draft-vocab 4096 covers {kept[w.flatten()].float().mean():.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
