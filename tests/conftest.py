"""Shared fixtures. Real assets are prepared once per machine (cached under $TRIFORCE_CACHE)."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch


def pytest_configure(config):
    """An xdist worker (run.sh test: 2 of them) gets its share of the cores as torch threads, so the
    two workers' passes do not contend for the same cores (tests that want more set it themselves)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))


# Modules whose tests start Ray clusters (in this process, `ray start`, or a job's private one).
RAY_MODULES = {"test_ray", "test_ray_job", "test_ray_private", "test_batch"}


def pytest_collection_modifyitems(items):
    """With pytest-xdist's --dist loadgroup (run.sh test runs the suite on 2 workers): a module's
    tests stay on one worker, so its module fixtures (engines, models) are built once, and the
    modules that start Ray clusters share one group, so one cluster runs at a time."""
    for item in items:
        module = item.path.stem
        item.add_marker(pytest.mark.xdist_group("ray" if module in RAY_MODULES else module))


@pytest.fixture(autouse=True)
def restore_torch_threads():
    """Code under test sets torch's global thread count (distill --threads, bench --threads, a
    replica, the Ray suite); each test's setting ends with the test, so tests that follow run
    with what they would get alone. Autograd's global switch is checked and restored the same way."""
    before, grad = torch.get_num_threads(), torch.is_grad_enabled()
    yield
    torch.set_num_threads(before)
    leaked = torch.is_grad_enabled() != grad
    torch.set_grad_enabled(grad)
    assert not leaked, "the code under test switched autograd globally (use inference_mode as a context)"


@pytest.fixture(autouse=True)
def private_pass_costs(tmp_path, monkeypatch):
    """--gamma auto stores pass costs under the cache dir for later processes (gamma.save_costs);
    each test keeps its own, so that no test reuses another's (or an earlier run's) costs."""
    from triforce.runtime import gamma
    monkeypatch.setattr(gamma, "stored_costs_dir", lambda: tmp_path / "pass_costs")


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module's tests (small tensors and model passes on a busy 2-core
    machine: thread hand-offs cost more than the arithmetic); restored after the module."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def default_model_dir() -> Path:
    """SmolLM2-135M-Instruct as an fp32 safetensors checkpoint (first run on a machine: ~50 s)."""
    from triforce.runtime.assets import default_model_dir as prepare

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


TINY_SHAPE = dict(architectures=["LlamaForCausalLM"], vocab_size=320, intermediate_size=96, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=10000.0)


@pytest.fixture(scope="session")
def tiny_random_pair(tmp_path_factory) -> list[str]:
    """A 5-layer target and a 1-layer drafter with random weights, sharing a tokenizer (GQA: 4 query
    heads, 2 KV heads): exactness claims only, never acceptance. Needs none of the real assets, so a
    GPU machine runs the tests that use it."""
    from triforce.runtime.bench.random_weights import random_checkpoint
    root = tmp_path_factory.mktemp("shapes")
    dirs = []
    for name, layers, hidden in (("target", 5, 64), ("drafter", 1, 32)):
        path = root / f"{name}.json"
        path.write_text(json.dumps(dict(TINY_SHAPE, hidden_size=hidden, num_hidden_layers=layers)))
        dirs.append(str(random_checkpoint(path)))
    return dirs
