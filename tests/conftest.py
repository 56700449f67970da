"""Shared fixtures. Real assets are prepared once per machine (cached under $TRIFORCE_CACHE)."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as an fp32 safetensors checkpoint (first run on a machine: ~50 s)."""
    from runtime.assets import default_model_dir as prepare

    return prepare()
