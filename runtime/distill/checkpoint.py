"""A run, in memory and on disk: started new or restored from its checkpoint (`prepare`), saved
whole into a temp dir and swapped in (`save_checkpoint`), one writer per directory (`run_lock`)."""
from __future__ import annotations

import dataclasses
import fcntl
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file

from triforce.runtime.config import ModelConfig, read_config_json
from triforce.runtime.distill.config import DEFAULT_LAYERS, DistillConfig
from triforce.runtime.distill.corpus import Corpus, corpus_tokens, split_corpus
from triforce.runtime.distill.student import argmax_tokens, build_student, trainable
from triforce.runtime.drafter import copy_tokenizer_files, drafter_config
from triforce.runtime.engine import resolve_model_dir
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import building
from triforce.runtime.model import Transformer, load_model
from triforce.runtime.probes import resolve_device
from triforce.runtime.vocab import write_token_counts


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
        return self.cfg.spent(self.state.step, self.state.elapsed_s) >= 1.0

    def report(self) -> dict:
        return {"command": self.command, "target": str(self.target_dir), "layers": self.layers,
                "corpus": self.corpus.source,
                "config": dataclasses.asdict(self.cfg),
                "held_out": {"fraction": self.cfg.held_out_fraction, "first_token": self.corpus.held_out_start,
                             "corpus_tokens": self.corpus.total, "windows": list(self.corpus.held_out.shape)},
                "step": self.state.step, "tokens_seen": self.state.tokens_seen,
                "elapsed_s": round(self.state.elapsed_s, 1), "history": self.state.history,
                "final": self.state.final}


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


def student_source(cfg: DistillConfig, target_dir: Path, target_cfg: ModelConfig, out: Path) -> Path:
    """Where the student's starting weights come from: the run's own checkpoint on --resume, the
    --init drafter (same embeddings and widths as the target), else the target's first layers."""
    if cfg.resume:
        return out
    if cfg.init is None:
        return target_dir
    init = Path(cfg.init).expanduser()
    if not (init / "config.json").is_file() or not (init / "model.safetensors").is_file():
        raise UserError(f"--init {str(init)!r} is not a drafter checkpoint (config.json + model.safetensors); "
                        "pass a directory that --draft-model accepts")
    init_cfg = ModelConfig.from_dir(init)
    for name in ("vocab_size", "hidden_size", "num_heads", "num_kv_heads", "head_dim"):
        if getattr(init_cfg, name) != getattr(target_cfg, name):
            raise UserError(f"--init {str(init)!r} has {name} {getattr(init_cfg, name)}, the target "
                            f"{str(target_dir)!r} has {getattr(target_cfg, name)}; pass a drafter of this target")
    return init


def resolve_layers(cfg: DistillConfig, target_cfg: ModelConfig, source: Path, target_dir: Path) -> int:
    saved = ModelConfig.from_dir(source).num_layers if source != target_dir else None
    layers = cfg.layers or saved or DEFAULT_LAYERS
    if saved is not None and layers != saved:
        raise UserError(f"--layers {layers} differs from the checkpoint's {saved} in {str(source)!r}; "
                        f"drop --layers to continue from it")
    if layers > target_cfg.num_layers:
        raise UserError(f"--layers {layers} exceeds the target's {target_cfg.num_layers} decoder layers; "
                        f"pass --layers between 1 and {target_cfg.num_layers}")
    return layers


def prepare(cfg: DistillConfig, tokens: torch.Tensor | None, log: Callable[[str], None]) -> Run:
    """Everything the loop needs: models, optimizer, data, and the saved state on resume."""
    target_dir, out = resolve_model_dir(cfg.target), Path(cfg.out).expanduser()
    target_cfg = ModelConfig.from_dir(target_dir)
    check_out_dir(out, cfg.resume)
    start_dir = student_source(cfg, target_dir, target_cfg, out)
    layers = resolve_layers(cfg, target_cfg, start_dir, target_dir)
    if cfg.seq_len > target_cfg.max_context:
        raise UserError(f"--seq-len {cfg.seq_len} exceeds the target's {target_cfg.max_context} positions; "
                        "pass a smaller --seq-len")
    if tokens is None:
        tokens = corpus_tokens(target_dir, cfg.corpus)
        source = cfg.corpus or "embedded King James Bible (runtime.assets.kjv_text)"
    else:
        source = "token ids passed to distill()"
    corpus = split_corpus(tokens, cfg, source)
    device = resolve_device(cfg.device)
    teacher = load_model(target_dir, cfg.dtype, device)
    student = build_student(start_dir, layers, device)
    optimizer = torch.optim.AdamW(trainable(student), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    state = restore(out, optimizer, gen) if cfg.resume else RunState()
    start = "" if start_dir == target_dir else f" (starting from {start_dir})"
    log(f"target {target_dir} ({target_cfg.num_layers} layers, {cfg.dtype}, {device}); drafter = its first "
        f"{layers} layers{start}, {sum(p.numel() for p in trainable(student)) / 1e6:.1f}M trained params")
    log(f"corpus {corpus.total:,} tokens: training on the first {len(corpus.train):,}, held-out from "
        f"token {corpus.held_out_start:,} ({corpus.held_out.shape[0]} windows of {cfg.seq_len})")
    target_top1 = argmax_tokens(teacher, corpus.held_out)
    return Run(cfg, target_dir, layers, teacher, student, optimizer, corpus, target_top1, gen, state)


def restore(out: Path, optimizer: torch.optim.Optimizer, gen: torch.Generator) -> RunState:
    """The optimizer's and the sampler's state, and the run's counters, from out/train_state.pt."""
    saved = torch.load(out / "train_state.pt", weights_only=True)
    optimizer.load_state_dict(saved["optimizer"])
    gen.set_state(saved["sampler"])
    return RunState(step=saved["step"], elapsed_s=saved["elapsed_s"], tokens_seen=saved["tokens_seen"],
                    history=list(saved["history"]))


def model_tensors(model: Transformer) -> dict[str, torch.Tensor]:
    """State dict for safetensors: tied lm_head dropped (it is embed_tokens; safetensors refuses
    shared storage and from_pretrained re-ties it)."""
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if model.cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def save_checkpoint(out: Path, run: Run) -> None:
    """config.json + model.safetensors (self-contained: embeddings included) + tokenizer files
    + the training tokens' counts (for --draft-vocab) + train_state.pt + distill.json, written in a
    temp dir and swapped in."""
    with building(out) as tmp:
        config = drafter_config(read_config_json(run.target_dir), run.layers, "float32")
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(model_tensors(run.student), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        copy_tokenizer_files(run.target_dir, tmp)
        write_token_counts(tmp, run.corpus.train, run.teacher.cfg.vocab_size)
        torch.save({"step": run.state.step, "elapsed_s": run.state.elapsed_s,
                    "tokens_seen": run.state.tokens_seen, "history": run.state.history,
                    "optimizer": run.optimizer.state_dict(), "sampler": run.gen.get_state()},
                   tmp / "train_state.pt")
        (tmp / "distill.json").write_text(json.dumps(run.report(), indent=1) + "\n")

