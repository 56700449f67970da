"""The compact drafter: only what it does not share with its target (decoder layers + final norm
in bf16), its config.json and a drafter.json manifest whose agreement is measured on the exported
weights themselves. runtime/drafter.py assembles it back into a complete checkpoint."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from triforce.runtime.config import ModelConfig, read_config_json
from triforce.runtime.distill.config import DistillConfig
from triforce.runtime.distill.corpus import corpus_tokens, split_corpus
from triforce.runtime.distill.student import held_out_metrics
from triforce.runtime.drafter import SHARED_TENSORS, _tensor_digest, assemble_drafter, drafter_config, read_tensors
from triforce.runtime.engine import resolve_model_dir
from triforce.runtime.errors import UserError
from triforce.runtime.io_utils import building
from triforce.runtime.model import load_model
from triforce.runtime.vocab import COUNTS_FILE, write_token_counts


def export_compact(ckpt_dir: str | Path, out_dir: str | Path, target_dir: str | Path | None = None,
                   tokens: torch.Tensor | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Writes into out_dir only what the drafter does not share with its target: decoder layers +
    final norm in bf16, config.json, the training tokens' counts (for --draft-vocab) and a
    drafter.json manifest. With `tokens` (or the run's corpus), the manifest records the agreement
    measured on the exported weights themselves (bf16 -> fp32 after assembly), on the same
    held-out windows as training."""
    log = log or (lambda text: print(f"[distill] {text}", file=sys.stderr, flush=True))
    ckpt_dir, out_dir = Path(ckpt_dir).expanduser(), Path(out_dir).expanduser()
    report = json.loads((ckpt_dir / "distill.json").read_text()) if (ckpt_dir / "distill.json").is_file() else {}
    target_dir = Path(target_dir) if target_dir else resolve_model_dir(None if not report else report.get("target"))
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
        if tokens is None and report:
            tokens = corpus_tokens(target_dir, report.get("config", {}).get("corpus"))
        if (ckpt_dir / COUNTS_FILE).is_file():
            shutil.copyfile(ckpt_dir / COUNTS_FILE, tmp / COUNTS_FILE)
        elif tokens is not None:   # a checkpoint from before the counts were recorded
            write_token_counts(tmp, split_corpus(tokens, held_out_settings(report), "(export)").train,
                               config["vocab_size"])
        manifest = {"base": target_dir.name, "shares": shared_names, "shared_sha256": _tensor_digest(shared),
                    "weights_sha256": hashlib.sha256((tmp / "model.safetensors").read_bytes()).hexdigest(),
                    "layers": config["num_hidden_layers"], "dtype": "bfloat16",
                    "command": report.get("command", ""), "tokens_seen": report.get("tokens_seen"),
                    "training_final": report.get("final"), "held_out": report.get("held_out")}
        if (tmp / COUNTS_FILE).is_file():
            manifest["token_counts_sha256"] = hashlib.sha256((tmp / COUNTS_FILE).read_bytes()).hexdigest()
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


def held_out_settings(report: dict) -> DistillConfig:
    """The run's split of its corpus into training tokens and held-out windows (distill.json)."""
    settings = report.get("config", {})
    return DistillConfig(out="", seq_len=settings.get("seq_len", 256), eval_windows=settings.get("eval_windows", 16),
                         held_out_fraction=settings.get("held_out_fraction", 0.02))


def exported_metrics(compact_dir: Path, target_dir: Path, report: dict, tokens: torch.Tensor | None) -> dict:
    """Held-out metrics of the compact weights as a user gets them (assembled, bf16 -> fp32)."""
    if tokens is None:
        return {}
    cfg = held_out_settings(report)
    windows = split_corpus(tokens, cfg, "(export)").held_out
    with tempfile.TemporaryDirectory(dir=compact_dir.parent) as assembled:
        assemble_drafter(compact_dir, target_dir, Path(assembled) / "d", manifest=False)
        metrics = held_out_metrics(load_model(Path(assembled) / "d"), load_model(target_dir), windows)
    return metrics | {"measured_on": f"held-out windows {list(windows.shape)} of the training corpus' "
                                      f"last {cfg.held_out_fraction:.0%} of tokens, exported weights"}
