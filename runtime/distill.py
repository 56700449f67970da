"""`triforce distill`: train a drafter for a target by distillation on a text corpus.

Student: the target's first N decoder layers + its final norm, initialised from the target's
weights. Its embeddings and lm_head ARE the target's (tied in SmolLM2) and stay frozen, so a
stored drafter needs only the N layers and the norm (`export_compact`); the rest is shared with
the target and re-attached on load (`assemble_drafter`, `default_drafter_dir`).

Loss: KL(p_target || q_student) at temperature 1, averaged over every position of random
windows of the corpus; the teacher's logits are computed on the fly. Windows are short (default
256 tokens): in TriForce the drafter only ever reads a StreamingLLM cache of 16 sinks + ~240
recent tokens, so long-context skill is not needed.

Held-out text: the last 2% of the corpus' tokens, never sampled for training. For the KJV that is
2 Peter 2:13 to the end of Revelation (~23K tokens); the agreement metric is measured on
16 evenly spaced windows of it: top-1 agreement = how often argmax(student) == argmax(target),
which is the greedy acceptance rate of the drafter.

Budgets (--steps, --minutes) count the whole run, across --resume. The learning rate warms up
over --warmup steps, then follows a cosine over the fraction of the budget spent.
"""
from __future__ import annotations

import argparse
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from runtime.config import ModelConfig, read_config_json
from runtime.errors import UserError
from runtime.model import TORCH_DTYPES, Transformer, checkpoint_files, load_model
from runtime.rope import Rope

# Files copied from the target so a drafter directory is a complete Hugging Face checkpoint.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
                   "special_tokens_map.json", "tokenizer_config.json", "chat_template.jinja",
                   "generation_config.json")
# Tensors the student takes from the target and never trains (lm_head only when untied).
SHARED_TENSORS = ("model.embed_tokens.weight", "lm_head.weight")

DEFAULT_LAYERS = 4
DEFAULT_BASE = "smollm2-135m-instruct"                       # the embedded target (assets.MODEL_DIR_NAME)
DRAFTERS_DIR = Path(__file__).resolve().parent.parent / "drafters"  # compact drafters stored in the repo


@dataclass(frozen=True)
class DistillConfig:
    out: str                          # checkpoint directory written (and read by resume)
    target: str | None = None         # target checkpoint directory; None = the embedded SmolLM2-135M
    corpus: str | None = None         # UTF-8 text file; None = the embedded King James Bible
    layers: int | None = None         # drafter depth: the target's first N layers (None: 4, or the checkpoint's)
    steps: int | None = None          # budget in optimizer steps (whole run, across resumes)
    minutes: float | None = None      # budget in wall-clock minutes (whole run); whichever ends first
    batch: int = 1                    # windows per step (few tokens per step: more steps per CPU-minute)
    seq_len: int = 256                # tokens per window (the drafter's streaming cache holds 256)
    lr: float = 1e-3                  # peak AdamW learning rate
    warmup: int = 20                  # linear warm-up steps
    min_lr_ratio: float = 0.1         # cosine floor, as a fraction of lr
    grad_clip: float = 1.0            # max global gradient norm
    eval_every: int = 50              # steps between held-out agreement measurements
    eval_windows: int = 16            # held-out windows of seq_len tokens
    held_out_fraction: float = 0.02   # tail of the corpus kept out of training
    save_every_minutes: float = 5.0   # periodic checkpoint interval (and one at the end)
    threads: int | None = None        # torch.set_num_threads; None = torch's default
    dtype: str = "fp32"               # teacher weights' dtype (the student always trains in fp32)
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    seed: int = 0                     # window sampling seed
    resume: bool = False              # continue the run saved in `out`

    def validate(self) -> "DistillConfig":
        for name in ("batch", "seq_len", "warmup", "eval_every", "eval_windows"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} {getattr(self, name)} must be at least 1")
        if self.layers is not None and self.layers < 1:
            raise UserError(f"--layers {self.layers} must be at least 1")
        if self.steps is None and self.minutes is None:
            raise UserError("no training budget: pass --steps N and/or --minutes M")
        if (self.steps is not None and self.steps < 0) or (self.minutes is not None and self.minutes <= 0):
            raise UserError(f"budget --steps {self.steps} must be >= 0 and --minutes {self.minutes} > 0")
        if not self.lr > 0 or self.save_every_minutes <= 0:
            raise UserError(f"--lr {self.lr} and --save-every-minutes {self.save_every_minutes} must be > 0")
        if not 0 < self.held_out_fraction < 1:
            raise UserError(f"held_out_fraction {self.held_out_fraction} must be between 0 and 1")
        if self.dtype not in TORCH_DTYPES:
            raise UserError(f"--dtype {self.dtype!r} is not one of {', '.join(TORCH_DTYPES)}")
        return self


# ---------------------------------------------------------------- forward without a cache


class NoCache:
    """The cache interface for one causal pass over whole windows, positions 0..T-1, nothing
    kept: what training needs (every position of a window is a prediction)."""

    def __init__(self, rope: Rope, batch: int):
        self.rope, self.batch = rope, batch
        self._cos = self._sin = None

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(T, device=self.rope.inv_freq.device).expand(self.batch, T)
        self._cos, self._sin = self.rope.tables(positions)  # [B, T, D]
        return self._cos, self._sin

    def update(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return Rope.rotate(k, self._cos, self._sin), v      # [B, Hkv, T, D]: S == T

    def end(self) -> None:
        self._cos = self._sin = None

    def get_seq_length(self) -> int:
        return 0

    def commit(self, length: int) -> None:
        pass  # nothing kept, nothing to evict

    def crop(self, length: int) -> None:
        if length != 0:
            raise ValueError(f"NoCache holds nothing; cannot crop to {length}")

    def reset(self) -> None:
        pass


def window_logits(model: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    """tokens [B, T] -> logits [B, T, V] float32; autograd on if the model has trainable params."""
    B, T = tokens.shape
    return model.logits(tokens, NoCache(model.rope(T), B))


def teacher_logits(teacher: Transformer, tokens: torch.Tensor) -> torch.Tensor:
    # no_grad, not inference_mode: the KL's backward saves these logits, and inference tensors
    # cannot be saved for backward.
    with torch.no_grad():
        return window_logits(teacher, tokens)  # [B, T, V]


# ---------------------------------------------------------------- corpus


def read_corpus(corpus: str | None) -> str:
    if corpus is None:
        from runtime.assets import kjv_text
        return kjv_text()
    path = Path(corpus).expanduser()
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"--corpus {str(path)!r} does not exist; pass a UTF-8 text file "
                        "(or omit --corpus for the embedded King James Bible)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read --corpus {str(path)!r} as UTF-8 text ({e}); pass a UTF-8 text file") from None


def check_corpus_path(corpus: str | None) -> None:
    """Fails early (before loading models) on a corpus path that is not a readable file."""
    if corpus is None:
        return
    path = Path(corpus).expanduser()
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise UserError(f"--corpus {str(path)!r} {what}; pass a UTF-8 text file "
                        "(or omit --corpus for the embedded King James Bible)")


def _tokenizer_key(target_dir: Path) -> bytes:
    digest = hashlib.sha256()
    for name in ("tokenizer.json", "tokenizer.model", "vocab.json", "merges.txt", "tokenizer_config.json"):
        if (target_dir / name).is_file():
            digest.update(name.encode() + b"\0" + (target_dir / name).read_bytes())
    return digest.digest()


def corpus_tokens(target_dir: Path, corpus: str | None) -> torch.Tensor:
    """All token ids of the corpus, [N] int64, cached in cache_dir()/distill keyed by
    tokenizer + text (tokenizing the 4.3M-character KJV takes seconds, every run)."""
    from runtime.assets import cache_dir
    text = read_corpus(corpus)
    key = hashlib.sha256(_tokenizer_key(target_dir) + text.encode("utf-8")).hexdigest()[:20]
    path = cache_dir() / "distill" / f"tokens-{key}.npy"
    if path.is_file():
        return torch.from_numpy(np.load(path).astype(np.int64))
    from runtime.engine import load_tokenizer
    tokenizer = load_tokenizer(target_dir)
    # verbose=False: the whole corpus is longer than model_max_length on purpose.
    ids = np.asarray(tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"], dtype=np.int32)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tokens.tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, ids)
        os.chmod(tmp, 0o644)   # mkstemp makes it owner-only; this is a shared cache
        os.replace(tmp, path)  # atomic: concurrent runs write the same bytes
    except BaseException:
        os.unlink(tmp)
        raise
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


# ---------------------------------------------------------------- models


def build_student(source_dir: Path, layers: int, device: torch.device) -> Transformer:
    """The first `layers` decoder layers + final norm of the checkpoint in source_dir (the target
    for a new run, the run's own checkpoint on resume), fp32; only layers and norm train."""
    cfg = dataclasses.replace(ModelConfig.from_dir(source_dir), num_layers=layers)
    student = load_model(source_dir, "fp32", device, cfg=cfg)  # reads only the tensors it needs
    student.model.layers.requires_grad_(True)
    student.model.norm.requires_grad_(True)
    return student


def trainable(model: Transformer) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]  # fixed order: optimizer state maps to it


def distill_loss(student_logits: torch.Tensor, target_logits: torch.Tensor) -> torch.Tensor:
    """KL(p_target || q_student) in nats per position; both [B, T, V] float32."""
    log_q = F.log_softmax(student_logits.flatten(0, 1), dim=-1)  # [B*T, V]
    log_p = F.log_softmax(target_logits.flatten(0, 1), dim=-1)
    return F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")


def train_step(student: Transformer, teacher: Transformer, optimizer: torch.optim.Optimizer,
               tokens: torch.Tensor, lr: float, grad_clip: float) -> float:
    """One optimizer step on windows [B, T]; returns the loss (nats/token)."""
    target = teacher_logits(teacher, tokens)
    loss = distill_loss(window_logits(student, tokens), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable(student), grad_clip)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return loss.item()  # host sync, once per step (the progress line needs it)


def learning_rate(cfg: DistillConfig, step: int, spent: float) -> float:
    """Linear warm-up over cfg.warmup steps, then cosine from lr to lr*min_lr_ratio as the
    budget fraction `spent` goes 0 -> 1."""
    warm = min(1.0, (step + 1) / cfg.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(spent, 1.0)))
    return cfg.lr * warm * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)


def budget_spent(cfg: DistillConfig, step: int, elapsed_s: float) -> float:
    """Fraction of the budget used: the larger of the step and time fractions."""
    fractions = [0.0]
    if cfg.steps is not None:
        fractions.append(step / cfg.steps if cfg.steps else 1.0)
    if cfg.minutes is not None:
        fractions.append(elapsed_s / (cfg.minutes * 60))
    return max(fractions)


# ---------------------------------------------------------------- held-out metrics


def _chunks(windows: torch.Tensor, size: int = 4) -> Iterator[torch.Tensor]:
    for i in range(0, len(windows), size):  # bounds the [chunk, T, V] logits in memory
        yield windows[i:i + size]


def argmax_tokens(model: Transformer, windows: torch.Tensor) -> torch.Tensor:
    """[W, T] -> each position's argmax next token [W, T] (on the CPU)."""
    with torch.no_grad():
        return torch.cat([window_logits(model, w.to(model.device)).argmax(-1).cpu() for w in _chunks(windows)])


def agreement(student: Transformer, windows: torch.Tensor, target_top1: torch.Tensor) -> float:
    """Top-1 agreement with the target (its argmax [W, T] precomputed once) on held-out windows."""
    return (argmax_tokens(student, windows) == target_top1).float().mean().item()  # host sync


def held_out_metrics(student: Transformer, teacher: Transformer, windows: torch.Tensor) -> dict:
    """agreement (greedy acceptance), accept_rate = E[sum_x min(p, q)] (acceptance at
    temperature 1) and KL (nats/token), on held-out windows [W, T]."""
    agree = accept = kl = 0.0
    with torch.no_grad():
        for w in _chunks(windows):
            w = w.to(student.device)
            p_logits, q_logits = window_logits(teacher, w), window_logits(student, w)  # [b, T, V]
            agree += (p_logits.argmax(-1) == q_logits.argmax(-1)).sum().item()
            accept += torch.minimum(p_logits.softmax(-1), q_logits.softmax(-1)).sum().item()
            kl += distill_loss(q_logits, p_logits).item() * w.numel()
    n = windows.numel()
    return {"agreement": round(agree / n, 4), "accept_rate": round(accept / n, 4), "kl": round(kl / n, 4)}


# ---------------------------------------------------------------- checkpoints


def drafter_config(target_raw: dict, layers: int, dtype: str) -> dict:
    """The target's config.json cut to `layers` decoder layers (per-layer lists trimmed)."""
    raw = dict(target_raw, num_hidden_layers=layers)
    if isinstance(raw.get("layer_types"), list):
        raw["layer_types"] = raw["layer_types"][:layers]
    if "max_window_layers" in raw:
        raw["max_window_layers"] = min(raw["max_window_layers"], layers)
    raw["torch_dtype" if "torch_dtype" in raw and "dtype" not in raw else "dtype"] = dtype
    return raw


def copy_tokenizer_files(source: Path, dest: Path) -> None:
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, dest / name)


def model_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """State dict for safetensors: tied lm_head dropped (it is embed_tokens; safetensors refuses
    shared storage and from_pretrained re-ties it)."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


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
    from runtime.durable import check_ready, fsync_dir, write_ready
    tmp = _fresh_dir(out)
    try:
        yield tmp
        for file in tmp.iterdir():
            file.chmod(0o644)
        write_ready(tmp)
        problem = check_ready(tmp, full=True)
        if problem:
            raise RuntimeError(f"checkpoint in {str(tmp)!r} does not verify after writing: {problem}")
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


@contextmanager
def run_lock(out: Path) -> Iterator[None]:
    """One run per output directory: a second one fails instead of interleaving checkpoints."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock_file:
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on close, also if killed
        except BlockingIOError:
            raise UserError(f"another `triforce distill` is writing to {str(out)!r}; wait for it or pick "
                            "another --out") from None
        yield


@dataclass
class RunState:
    """What a checkpoint restores besides weights (train_state.pt) and reports (distill.json)."""
    step: int = 0
    elapsed_s: float = 0.0
    tokens_seen: int = 0
    history: list = field(default_factory=list)  # [{"step", "tokens", "elapsed_s", "loss", "agreement"}]
    final: dict | None = None


def save_checkpoint(out: Path, run: "Run") -> None:
    """config.json + model.safetensors (self-contained: embeddings included) + tokenizer files
    + train_state.pt + distill.json, written in a temp dir and swapped in."""
    with building(out) as tmp:
        config = drafter_config(read_config_json(run.target_dir), run.layers, "float32")
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(model_tensors(run.student), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        copy_tokenizer_files(run.target_dir, tmp)
        torch.save({"step": run.state.step, "elapsed_s": run.state.elapsed_s,
                    "tokens_seen": run.state.tokens_seen, "history": run.state.history,
                    "optimizer": run.optimizer.state_dict(), "sampler": run.gen.get_state()},
                   tmp / "train_state.pt")
        (tmp / "distill.json").write_text(json.dumps(run.report(), indent=1) + "\n")


# ---------------------------------------------------------------- the run


@dataclass
class Run:
    cfg: DistillConfig
    target_dir: Path
    layers: int
    teacher: Transformer
    student: Transformer
    optimizer: torch.optim.Optimizer
    corpus: Corpus
    target_top1: torch.Tensor        # [W, T] teacher argmax on the held-out windows
    gen: torch.Generator             # window sampler (CPU), saved in train_state.pt
    state: RunState
    command: str = ""

    def done(self) -> bool:
        return budget_spent(self.cfg, self.state.step, self.state.elapsed_s) >= 1.0

    def report(self) -> dict:
        return {"command": self.command, "target": str(self.target_dir), "layers": self.layers,
                "corpus": self.corpus.source,
                "config": dataclasses.asdict(self.cfg),
                "held_out": {"fraction": self.cfg.held_out_fraction, "first_token": self.corpus.held_out_start,
                             "corpus_tokens": self.corpus.total, "windows": list(self.corpus.held_out.shape)},
                "step": self.state.step, "tokens_seen": self.state.tokens_seen,
                "elapsed_s": round(self.state.elapsed_s, 1), "history": self.state.history,
                "final": self.state.final}


def resolve_target(target: str | None) -> Path:
    from runtime.engine import resolve_model_dir
    return resolve_model_dir(target)


def check_out_dir(out: Path, resume: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {str(out)!r} is a file; pass a directory path (it is created if missing)")
    has_run = (out / "train_state.pt").is_file()
    if resume and not has_run:
        raise UserError(f"--resume: {str(out)!r} holds no distillation checkpoint (train_state.pt); "
                        "drop --resume to start a new run there")
    if has_run and not resume:
        raise UserError(f"{str(out)!r} already holds a distillation run; pass --resume to continue it "
                        "or choose another --out")


def resolve_layers(cfg: DistillConfig, target_cfg: ModelConfig, out: Path) -> int:
    saved = ModelConfig.from_dir(out).num_layers if cfg.resume else None
    layers = cfg.layers or saved or DEFAULT_LAYERS
    if saved is not None and layers != saved:
        raise UserError(f"--layers {layers} differs from the checkpoint's {saved} in {str(out)!r}; "
                        f"drop --layers to resume it")
    if layers > target_cfg.num_layers:
        raise UserError(f"--layers {layers} exceeds the target's {target_cfg.num_layers} decoder layers; "
                        f"pass --layers between 1 and {target_cfg.num_layers}")
    return layers


def prepare(cfg: DistillConfig, tokens: torch.Tensor | None, log: Callable[[str], None]) -> Run:
    """Everything the loop needs: models, optimizer, data, and the saved state on resume."""
    from runtime.engine import resolve_device
    target_dir, out = resolve_target(cfg.target), Path(cfg.out).expanduser()
    target_cfg = ModelConfig.from_dir(target_dir)
    check_out_dir(out, cfg.resume)
    layers = resolve_layers(cfg, target_cfg, out)
    if cfg.seq_len > target_cfg.max_context:
        raise UserError(f"--seq-len {cfg.seq_len} exceeds the target's {target_cfg.max_context} positions; "
                        "pass a smaller --seq-len")
    if tokens is None:
        check_corpus_path(cfg.corpus)
        tokens = corpus_tokens(target_dir, cfg.corpus)
        source = cfg.corpus or "embedded King James Bible (runtime.assets.kjv_text)"
    else:
        source = "token ids passed to distill()"
    corpus = split_corpus(tokens, cfg, source)
    device = resolve_device(cfg.device)
    teacher = load_model(target_dir, cfg.dtype, device)
    student = build_student(out if cfg.resume else target_dir, layers, device)
    optimizer = torch.optim.AdamW(trainable(student), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    state = RunState()
    if cfg.resume:
        saved = torch.load(out / "train_state.pt", weights_only=True)
        optimizer.load_state_dict(saved["optimizer"])
        gen.set_state(saved["sampler"])
        state = RunState(step=saved["step"], elapsed_s=saved["elapsed_s"], tokens_seen=saved["tokens_seen"],
                         history=list(saved["history"]))
    log(f"target {target_dir} ({target_cfg.num_layers} layers, {cfg.dtype}, {device}); drafter = its first "
        f"{layers} layers, {sum(p.numel() for p in trainable(student)) / 1e6:.1f}M trained params")
    log(f"corpus {corpus.total:,} tokens: training on the first {len(corpus.train):,}, held-out from "
        f"token {corpus.held_out_start:,} ({corpus.held_out.shape[0]} windows of {cfg.seq_len})")
    target_top1 = argmax_tokens(teacher, corpus.held_out)
    return Run(cfg, target_dir, layers, teacher, student, optimizer, corpus, target_top1, gen, state)


class ProgressLine:
    """The status line on stderr: redrawn in place on a terminal; in a log file, a plain line at
    most every `every_s` seconds and at every held-out measurement."""

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
        if self.tty and self.width:
            self.stream.write("\n")
            self.stream.flush()


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def status_text(run: Run, losses: deque, step_times: deque, tokens_per_step: int) -> str:
    cfg, st = run.cfg, run.state
    tok_s = tokens_per_step * len(step_times) / max(sum(step_times), 1e-9)
    remaining = [cfg.minutes * 60 - st.elapsed_s] if cfg.minutes is not None else []
    if cfg.steps is not None and st.step:
        remaining.append((cfg.steps - st.step) * st.elapsed_s / st.step)
    last = st.history[-1] if st.history else None
    agree = f"{last['agreement']:.1%} @ step {last['step']}" if last else "-"
    loss = f"{sum(losses) / len(losses):.3f}" if losses else "-"
    of = f"/{cfg.steps}" if cfg.steps is not None else ""
    return (f"[distill] step {st.step}{of} | {tok_s:.0f} tok/s | loss {loss} | held-out agreement {agree} | "
            f"{_clock(st.elapsed_s)} elapsed | ETA {_clock(min(remaining)) if remaining else '?'}")


def measure(run: Run, loss: float | None) -> None:
    """Held-out agreement, appended to the run's history."""
    st = run.state
    value = agreement(run.student, run.corpus.held_out, run.target_top1)
    st.history.append({"step": st.step, "tokens": st.tokens_seen, "elapsed_s": round(st.elapsed_s, 1),
                       "loss": None if loss is None else round(loss, 4), "agreement": round(value, 4)})


def train(run: Run, progress: ProgressLine, log: Callable[[str], None]) -> None:
    """The loop: sample windows, one KL step, measure every eval_every steps, checkpoint every
    save_every_minutes; a checkpoint is also written on interrupt and at the end."""
    cfg, st, out = run.cfg, run.state, Path(run.cfg.out).expanduser()
    losses, step_times = deque(maxlen=20), deque(maxlen=20)  # recent steps, for the status line
    clock_zero = time.monotonic() - st.elapsed_s             # elapsed continues across resumes
    last_save = time.monotonic()
    if not st.history or st.history[-1]["step"] != st.step:
        measure(run, None)                                   # the starting point (after resume: where it stands)
        progress.show(status_text(run, losses, step_times, cfg.batch * cfg.seq_len), force=True)
    try:
        while not run.done():
            tokens = sample_windows(run.corpus.train, cfg.batch, cfg.seq_len, run.gen).to(run.student.device)
            lr = learning_rate(cfg, st.step, budget_spent(cfg, st.step, st.elapsed_s))
            started = time.perf_counter()
            losses.append(train_step(run.student, run.teacher, run.optimizer, tokens, lr, cfg.grad_clip))
            step_times.append(time.perf_counter() - started)
            st.step, st.tokens_seen = st.step + 1, st.tokens_seen + tokens.numel()
            st.elapsed_s = time.monotonic() - clock_zero
            evaluated = st.step % cfg.eval_every == 0
            if evaluated:
                measure(run, sum(losses) / len(losses))
            progress.show(status_text(run, losses, step_times, tokens.numel()), force=evaluated)
            if time.monotonic() - last_save >= cfg.save_every_minutes * 60:
                save_checkpoint(out, run)
                last_save = time.monotonic()
    except KeyboardInterrupt:
        progress.close()
        log(f"interrupted at step {st.step}: saving a checkpoint to {out} (continue with --resume)")
        save_checkpoint(out, run)
        raise
    progress.close()
    if st.history[-1]["step"] != st.step:
        measure(run, sum(losses) / len(losses) if losses else None)


def distill(cfg: DistillConfig, tokens: torch.Tensor | None = None, command: str = "",
            log: Callable[[str], None] | None = None, progress: ProgressLine | None = None) -> dict:
    """Trains (or continues) a drafter and writes its checkpoint to cfg.out; returns distill.json's
    content. `tokens` [N] replaces the corpus (tests: no tokenizer needed)."""
    cfg = cfg.validate()
    log = log or (lambda text: print(f"[distill] {text}", file=sys.stderr, flush=True))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Most of a 49K-way softmax underflows to denormals, which x86 multiplies ~100x slower: without
    # this the KL's elementwise ops cost as much as the student's matmuls. Process-wide, harmless.
    torch.set_flush_denormal(True)
    out = Path(cfg.out).expanduser()
    if out.exists() and not out.is_dir():
        check_out_dir(out, cfg.resume)
    with run_lock(out):
        recover_dir(out)
        run = prepare(cfg, tokens, log)
        run.command = command
        train(run, progress or ProgressLine(), log)
        started = time.monotonic()
        run.state.final = held_out_metrics(run.student, run.teacher, run.corpus.held_out)
        run.state.elapsed_s += time.monotonic() - started
        save_checkpoint(out, run)
    final = run.state.final
    log(f"done: step {run.state.step}, {run.state.tokens_seen:,} tokens, {_clock(run.state.elapsed_s)}; held-out "
        f"agreement {final['agreement']:.1%}, accept rate (T=1) {final['accept_rate']:.1%}, "
        f"KL {final['kl']:.3f}; checkpoint: {out}")
    return run.report()


# ---------------------------------------------------------------- compact export and assembly


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


def export_compact(ckpt_dir: str | Path, out_dir: str | Path, target_dir: str | Path | None = None,
                   tokens: torch.Tensor | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Writes into out_dir only what the drafter does not share with its target: decoder layers +
    final norm in bf16, config.json and a drafter.json manifest. With `tokens` (or the run's
    corpus), the manifest records the agreement measured on the exported weights themselves
    (bf16 -> fp32 after assembly), on the same held-out windows as training."""
    log = log or (lambda text: print(f"[distill] {text}", file=sys.stderr, flush=True))
    ckpt_dir, out_dir = Path(ckpt_dir).expanduser(), Path(out_dir).expanduser()
    report = json.loads((ckpt_dir / "distill.json").read_text()) if (ckpt_dir / "distill.json").is_file() else {}
    target_dir = Path(target_dir) if target_dir else resolve_target(None if not report else report.get("target"))
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--export-shared {str(out_dir)!r} is a file; pass a directory path")
    own = read_tensors(ckpt_dir, lambda name: name not in SHARED_TENSORS)
    shared_names = sorted(read_tensors(ckpt_dir, lambda name: name in SHARED_TENSORS))
    shared = read_tensors(target_dir, lambda name: name in shared_names)
    check_shared(ckpt_dir, target_dir, shared)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with building(out_dir) as tmp:
        save_file({k: v.to(torch.bfloat16).contiguous() for k, v in own.items()}, str(tmp / "model.safetensors"),
                  metadata={"format": "pt"})
        config = drafter_config(read_config_json(ckpt_dir), ModelConfig.from_dir(ckpt_dir).num_layers, "bfloat16")
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        manifest = {"base": target_dir.name, "shares": shared_names, "shared_sha256": _tensor_digest(shared),
                    "weights_sha256": hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest(),
                    "layers": config["num_hidden_layers"], "dtype": "bfloat16",
                    "command": report.get("command", ""), "tokens_seen": report.get("tokens_seen"),
                    "training_final": report.get("final"), "held_out": report.get("held_out")}
        manifest.update(exported_metrics(tmp, target_dir, report, tokens))
        (tmp / "drafter.json").write_text(json.dumps(manifest, indent=1) + "\n")
    size = sum(f.stat().st_size for f in out_dir.iterdir() if f.is_file())
    log(f"exported {out_dir} ({size / 1e6:.1f} MB): held-out agreement {manifest.get('agreement')}")
    return manifest


def check_shared(ckpt_dir: Path, target_dir: Path, shared: dict[str, torch.Tensor]) -> None:
    """The student's frozen tensors must be the target's: else the export would pair the drafter
    with embeddings it was not trained with."""
    mine = read_tensors(ckpt_dir, lambda name: name in shared)
    for name, tensor in shared.items():
        if mine[name].shape != tensor.shape or not torch.equal(mine[name].float(), tensor.float()):
            raise UserError(f"{name} in {str(ckpt_dir)!r} differs from the target's in {str(target_dir)!r}; "
                            "pass the --model the drafter was distilled from")


def exported_metrics(compact_dir: Path, target_dir: Path, report: dict, tokens: torch.Tensor | None) -> dict:
    """Held-out metrics of the compact weights as a user gets them (assembled, bf16 -> fp32)."""
    if tokens is None and not report:
        return {}
    settings = report.get("config", {})
    cfg = DistillConfig(out=str(compact_dir), seq_len=settings.get("seq_len", 256),
                        eval_windows=settings.get("eval_windows", 16),
                        held_out_fraction=settings.get("held_out_fraction", 0.02))
    if tokens is None:
        tokens = corpus_tokens(target_dir, settings.get("corpus"))
    windows = split_corpus(tokens, cfg, "(export)").held_out
    with tempfile.TemporaryDirectory(dir=compact_dir.parent) as assembled:
        assemble_drafter(compact_dir, target_dir, Path(assembled) / "d", manifest=False)
        metrics = held_out_metrics(load_model(Path(assembled) / "d"), load_model(target_dir), windows)
    return metrics | {"measured_on": f"held-out windows {list(windows.shape)} of the training corpus' "
                                      f"last {cfg.held_out_fraction:.0%} of tokens, exported weights"}


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
    config["torch_dtype" if "torch_dtype" in config and "dtype" not in config else "dtype"] = "float32"
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    copy_tokenizer_files(target_dir, out_dir)
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
    from runtime.assets import _locked, cache_dir, default_model_dir
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
        for stale in target.parent.glob(f".{target.name}.tmp-*"):  # we hold the lock: killed assemblers'
            shutil.rmtree(stale, ignore_errors=True)
        with building(target) as tmp:  # replaces a stale one (an older repo drafter) too
            assemble_drafter(compact, base, tmp)
    return target


# ---------------------------------------------------------------- command line


def add_distill_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "distill", help="train a drafter for a target by distillation",
        description="Distil a drafter (the target's first N layers, embeddings shared and frozen) against the "
                    "target's output distribution on a text corpus; writes a Hugging Face checkpoint that "
                    "--draft-model accepts.")
    p.add_argument("--model", help="target checkpoint directory (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--corpus", help="UTF-8 text file to train on (default: the embedded King James Bible)")
    p.add_argument("--out", help="checkpoint directory (default: <cache>/distill/<target>-<N>l)")
    p.add_argument("--layers", type=int, help=f"drafter depth: the target's first N layers (default {DEFAULT_LAYERS})")
    p.add_argument("--steps", type=int, help="budget: optimizer steps (whole run, across --resume)")
    p.add_argument("--minutes", type=float, help="budget: wall-clock minutes (whole run); whichever ends first")
    p.add_argument("--batch", type=int, default=1, help="windows per step (default 1)")
    p.add_argument("--seq-len", type=int, default=256, help="tokens per window (default 256)")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps (default 20)")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: torch's choice)")
    p.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="fp32",
                   help="teacher dtype (default fp32; bf16 pays off on GPUs and CPUs with AMX)")
    p.add_argument("--device", default="auto", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--eval-every", type=int, default=50, help="steps between held-out measurements (default 50)")
    p.add_argument("--save-every-minutes", type=float, default=5.0, help="checkpoint interval (default 5)")
    p.add_argument("--seed", type=int, default=0, help="window sampling seed (default 0)")
    p.add_argument("--resume", action="store_true", help="continue the run saved in --out")
    p.add_argument("--export-shared", metavar="DIR",
                   help="then write only the drafter's own tensors (bf16) + manifest to DIR; without a budget, "
                        "export the checkpoint in --out as it is")
    p.set_defaults(func=cmd_distill)
    return p


ARG_FIELDS = ("corpus", "layers", "steps", "minutes", "batch", "seq_len", "lr", "warmup", "threads", "dtype",
              "device", "eval_every", "save_every_minutes", "seed", "resume")


def config_from_args(args: argparse.Namespace) -> DistillConfig:
    out = args.out
    if out is None:
        from runtime.assets import cache_dir
        name = Path(args.model).name if args.model else DEFAULT_BASE
        out = str(cache_dir() / "distill" / f"{name}-{args.layers or DEFAULT_LAYERS}l")
    return DistillConfig(out=out, target=args.model, **{k: getattr(args, k) for k in ARG_FIELDS})


def command_line(cfg: DistillConfig, export: str | None) -> str:
    """The run as one reproducible `triforce distill` command (resolved values, not argv)."""
    words = ["triforce", "distill"]
    defaults = DistillConfig(out="")
    for name in ("target", "out", *ARG_FIELDS):
        value = getattr(cfg, name)
        if value is None or value is False or (name != "out" and value == getattr(defaults, name)):
            continue
        flag = "--model" if name == "target" else "--" + name.replace("_", "-")
        words += [flag] if value is True else [flag, str(value)]
    return shlex.join(words + (["--export-shared", export] if export else []))


def _sigterm_as_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt  # `kill PID` then saves a checkpoint like Ctrl-C


def cmd_distill(args: argparse.Namespace) -> int:
    cfg = config_from_args(args)
    export_only = args.export_shared and cfg.steps is None and cfg.minutes is None
    if not export_only:
        signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
        distill(cfg, command=command_line(cfg, args.export_shared))
    if args.export_shared:
        out = Path(cfg.out).expanduser()
        if not (out / "model.safetensors").is_file():
            raise UserError(f"--export-shared: {str(out)!r} holds no drafter checkpoint; pass its --out, "
                            "or a budget to train one first")
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        # The target and corpus default to the run's own (distill.json), not to the embedded ones.
        target = resolve_target(cfg.target) if cfg.target else None
        tokens = None if cfg.corpus is None else corpus_tokens(target or resolve_target(None), cfg.corpus)
        export_compact(out, args.export_shared, target, tokens)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m runtime.distill ARGS` == `triforce distill ARGS`."""
    from runtime.cli import main as cli_main
    return cli_main(["distill", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
