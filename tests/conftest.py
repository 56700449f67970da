"""Shared fixtures. Real assets are prepared once per machine (cached under $TRIFORCE_CACHE)."""

import json
import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as an fp32 safetensors checkpoint (first run on a machine: ~50 s)."""
    from runtime.assets import default_model_dir as prepare

    return prepare()


@pytest.fixture(scope="session")
def cut_drafter(default_model_dir, tmp_path_factory) -> Path:
    """The target's first 4 layers as a drafter (undistilled): a poor but honest drafter, which
    exercises rejections at every level."""
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("drafter")
    raw = json.loads((default_model_dir / "config.json").read_text())
    raw["num_hidden_layers"] = 4
    (out / "config.json").write_text(json.dumps(raw))
    tensors = load_file(str(default_model_dir / "model.safetensors"))
    save_file({k: v for k, v in tensors.items()
               if not k.startswith("model.layers.") or int(k.split(".")[2]) < 4}, str(out / "model.safetensors"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(default_model_dir / name, out / name)
    return out
