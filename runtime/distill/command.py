"""`triforce distill` and `python -m triforce.runtime.distill`: flags -> DistillConfig -> train, then
optionally export the compact drafter. Flags and distill.json keys are a contract: add, never rename."""
from __future__ import annotations

import argparse
import shlex
import signal
from pathlib import Path

import torch

from triforce.runtime import assets
from triforce.runtime.distill.config import DEFAULT_LAYERS, DistillConfig
from triforce.runtime.distill.corpus import corpus_tokens
from triforce.runtime.distill.export import export_compact
from triforce.runtime.distill.train import distill
from triforce.runtime.drafter import DEFAULT_BASE
from triforce.runtime.engine import resolve_model_dir
from triforce.runtime.errors import UserError
from triforce.runtime.model import TORCH_DTYPES


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
    p.add_argument("--init", metavar="DIR",
                   help="start from this drafter checkpoint (one --draft-model accepts, e.g. the embedded drafter "
                        "assembled in <cache>/models) instead of the target's first layers: to adapt a "
                        "drafter to a new corpus")
    p.add_argument("--export-shared", metavar="DIR",
                   help="then write only the drafter's own tensors (bf16) + manifest to DIR; without a budget, "
                        "export the checkpoint in --out as it is")
    p.set_defaults(func=cmd_distill)
    return p


ARG_FIELDS = ("corpus", "layers", "steps", "minutes", "batch", "seq_len", "lr", "warmup", "threads", "dtype",
              "device", "eval_every", "save_every_minutes", "seed", "resume", "init")


def config_from_args(args: argparse.Namespace) -> DistillConfig:
    out = args.out
    if out is None:
        name = Path(args.model).name if args.model else DEFAULT_BASE
        out = str(assets.cache_dir() / "distill" / f"{name}-{args.layers or DEFAULT_LAYERS}l")
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
        target = resolve_model_dir(cfg.target) if cfg.target else None
        tokens = None if cfg.corpus is None else corpus_tokens(target or resolve_model_dir(None), cfg.corpus)
        export_compact(out, args.export_shared, target, tokens)
    return 0
