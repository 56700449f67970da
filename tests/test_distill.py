"""Drafter distillation on a tiny random Llama target (token ids passed directly: no tokenizer).

Random weights are fine: the claims are that training lowers the KL, that checkpoints are complete
and resumable, and that the compact export reassembles into the same model.
"""
import argparse
import io
import json

import pytest
import torch
from safetensors import safe_open

from triforce.runtime.distill.command import add_distill_parser
from triforce.runtime.distill.config import DistillConfig
from triforce.runtime.distill.corpus import split_corpus
from triforce.runtime.distill.export import export_compact
from triforce.runtime.distill.student import build_student, held_out_metrics, window_logits
from triforce.runtime.distill.train import distill
from triforce.runtime.drafter import assemble_drafter
from triforce.runtime.io_utils import ProgressLine
from triforce.runtime.cache_full import FullCache
from triforce.runtime.errors import UserError
from triforce.runtime.model import load_model
from triforce.runtime.vocab import drafter_token_counts

transformers = pytest.importorskip("transformers")

VOCAB = 96
# initializer_range 0.3: a peaked target distribution, so the KL has something to learn
TINY = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=True, initializer_range=0.3)
QUIET = dict(log=lambda text: None)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    path = tmp_path_factory.mktemp("target")
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**TINY)).eval().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokens():
    # A periodic "text" (one 8-token phrase, 6000 tokens): few distinct windows, so a dozen steps
    # visibly fit the held-out ones. (On random text a random target is not learnable that fast.)
    return torch.randint(0, VOCAB, (8,), generator=torch.Generator().manual_seed(1)).repeat(750)


def config(target, out, **overrides):
    base = dict(out=str(out), target=str(target), layers=2, steps=12, batch=2, seq_len=32, lr=3e-3, warmup=2,
                eval_every=4, eval_windows=4, threads=1)
    return DistillConfig(**{**base, **overrides})


@pytest.fixture(scope="module")
def trained(target, tokens, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "drafter"
    report = distill(config(target, out), tokens=tokens, command="triforce distill (test)", **QUIET)
    return out, report


def test_no_cache_forward_equals_full_cache(target):
    model = load_model(target)
    tokens = torch.randint(0, VOCAB, (2, 20), generator=torch.Generator().manual_seed(2))
    full = model(tokens, FullCache(model.cfg, model.rope(20), 2, 20, model.device, model.dtype))
    torch.testing.assert_close(window_logits(model, tokens), full)


def test_training_lowers_held_out_kl_and_records_agreement(trained, target, tokens):
    _, report = trained
    assert [h["step"] for h in report["history"]] == [0, 4, 8, 12]
    history = report["history"]
    assert history[-1]["loss"] < history[1]["loss"] and history[-1]["agreement"] > history[0]["agreement"], history
    held_out = split_corpus(tokens, config(target, "unused"), "test").held_out
    untrained = held_out_metrics(build_student(target, 2, torch.device("cpu")), load_model(target), held_out)
    final = report["final"]
    assert final["kl"] < 0.7 * untrained["kl"], (final, untrained)
    assert final["agreement"] > untrained["agreement"] and final["accept_rate"] > untrained["accept_rate"]


def test_checkpoint_loads_with_ours_and_transformers(trained):
    out, report = trained
    assert {"config.json", "model.safetensors", "train_state.pt", "distill.json"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 2
    assert json.loads((out / "distill.json").read_text())["step"] == report["step"] == 12
    ours = load_model(out)
    hf = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = torch.randint(0, VOCAB, (1, 30), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(window_logits(ours, tokens), hf(tokens).logits, rtol=1e-4, atol=1e-4)


def test_token_counts_follow_the_drafter_from_checkpoint_to_assembly(trained, target, tokens, tmp_path):
    """--draft-vocab keeps the most frequent tokens of the drafter's own corpus: the counts of its
    training tokens are saved with the checkpoint, exported, and assembled beside its weights."""
    out, _ = trained
    train = split_corpus(tokens, config(target, "unused"), "test").train
    expected = torch.bincount(train, minlength=VOCAB)
    assert torch.equal(drafter_token_counts(out, None, VOCAB), expected)
    manifest = export_compact(out, tmp_path / "compact", target, tokens, **QUIET)
    assert "token_counts_sha256" in manifest
    assemble_drafter(tmp_path / "compact", target, tmp_path / "assembled")
    assert torch.equal(drafter_token_counts(tmp_path / "assembled", None, VOCAB), expected)
    load_model(tmp_path / "assembled")   # the counts are not read as weights
    (tmp_path / "old").mkdir()           # a checkpoint from before counts were recorded: export counts its corpus
    for name in ("config.json", "model.safetensors", "distill.json"):
        (tmp_path / "old" / name).write_bytes((out / name).read_bytes())
    export_compact(tmp_path / "old", tmp_path / "old-compact", target, tokens, **QUIET)
    assert torch.equal(drafter_token_counts(tmp_path / "old-compact", None, VOCAB), expected)
    with pytest.raises(UserError, match="counts \\(96,\\) token ids, the target's vocabulary has 97"):
        drafter_token_counts(out, None, VOCAB + 1)


def test_init_starts_a_new_run_from_a_drafter(trained, target, tokens, tmp_path):
    """--init: a new run (its own step count, optimizer and corpus) from a trained drafter's layers."""
    out, report = trained
    adapted = distill(config(target, tmp_path / "adapted", steps=4, init=str(out)), tokens=tokens, **QUIET)
    assert adapted["step"] == 4 and adapted["history"][0]["step"] == 0
    assert adapted["history"][0]["agreement"] == report["history"][-1]["agreement"]  # starts where it ended
    with pytest.raises(UserError, match="starts a new run and --resume continues one"):
        distill(config(target, tmp_path / "adapted", init=str(out), resume=True), tokens=tokens, **QUIET)
    with pytest.raises(UserError, match="is not a drafter checkpoint"):
        distill(config(target, tmp_path / "x", init=str(tmp_path)), tokens=tokens, **QUIET)
    with pytest.raises(UserError, match="--layers 3 differs from the checkpoint's 2"):
        distill(config(target, tmp_path / "y", init=str(out), layers=3), tokens=tokens, **QUIET)


def test_embeddings_stay_the_targets(trained, target):
    out, _ = trained
    assert torch.equal(load_model(out).model.embed_tokens.weight, load_model(target).model.embed_tokens.weight)


class InterruptAt(ProgressLine):
    """Ctrl-C right after step `step`."""

    def __init__(self, step):
        super().__init__(io.StringIO())
        self.step = step

    def show(self, text, force=False):
        if text.startswith(f"[distill] step {self.step}/"):
            raise KeyboardInterrupt


def test_interrupt_then_resume_continues_exactly(target, tokens, tmp_path):
    """Interrupted after step 3 of 6, then --resume: equals 6 steps at once (same batches,
    optimizer state and learning rates)."""
    distill(config(target, tmp_path / "a", steps=6), tokens=tokens, **QUIET)
    with pytest.raises(KeyboardInterrupt):
        distill(config(target, tmp_path / "b", steps=6), tokens=tokens, progress=InterruptAt(3), **QUIET)
    assert json.loads((tmp_path / "b" / "distill.json").read_text())["step"] == 3
    report = distill(config(target, tmp_path / "b", steps=6, resume=True), tokens=tokens, **QUIET)
    assert report["step"] == 6 and report["tokens_seen"] == 6 * 2 * 32
    assert [h["step"] for h in report["history"]] == [0, 3, 4, 6]  # 3: measured on resuming
    a, b = load_model(tmp_path / "a").state_dict(), load_model(tmp_path / "b").state_dict()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)


def test_export_writes_only_own_tensors_and_reassembles(trained, target, tokens, tmp_path):
    out, report = trained
    manifest = export_compact(out, tmp_path / "compact", target, tokens, **QUIET)
    with safe_open(str(tmp_path / "compact" / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        assert all(f.get_tensor(n).dtype == torch.bfloat16 for n in names)
    assert names == {n for n in load_model(out).state_dict() if n.startswith(("model.layers.", "model.norm."))}
    assert manifest["shares"] == ["model.embed_tokens.weight"] and manifest["base"] == target.name
    # measured again on the exported (bf16) weights: as good as the trained ones, up to rounding
    assert abs(manifest["agreement"] - report["final"]["agreement"]) <= 0.05, (manifest, report["final"])
    assert json.loads((tmp_path / "compact" / "drafter.json").read_text()) == manifest

    assemble_drafter(tmp_path / "compact", target, tmp_path / "assembled")
    assembled = load_model(tmp_path / "assembled")
    expected = load_model(out)  # the trained checkpoint, its own tensors rounded as the export stores them
    with torch.no_grad():
        for name, param in expected.named_parameters():
            if name.startswith(("model.layers.", "model.norm.")):
                param.copy_(param.to(torch.bfloat16).float())
    tokens_in = tokens[:40].view(1, 40)
    torch.testing.assert_close(window_logits(assembled, tokens_in), window_logits(expected, tokens_in),
                               rtol=0, atol=0)
    transformers.LlamaForCausalLM.from_pretrained(tmp_path / "assembled")  # loads as a plain checkpoint


def cli(argv):
    parser = argparse.ArgumentParser()
    add_distill_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["distill", *argv])
    return args.func(args)


def test_bad_inputs_raise_user_errors(target, tokens, tmp_path):
    budget = ["--model", str(target), "--steps", "1", "--seq-len", "32", "--out", str(tmp_path / "run")]
    with pytest.raises(UserError, match="does not exist"):
        cli([*budget, "--corpus", str(tmp_path / "missing.txt")])
    with pytest.raises(UserError, match="--layers 9 exceeds the target's 4"):
        cli([*budget, "--layers", "9"])
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(UserError, match="is a file"):
        cli(["--model", str(target), "--steps", "1", "--seq-len", "32", "--out", str(tmp_path / "a-file")])
    with pytest.raises(UserError, match="no training budget"):
        cli(["--model", str(target), "--out", str(tmp_path / "run")])
    with pytest.raises(UserError, match="holds no distillation checkpoint"):
        cli([*budget, "--resume"])
    with pytest.raises(UserError, match="corpus .* has 50 tokens"):
        distill(config(target, tmp_path / "short"), tokens=tokens[:50], **QUIET)


def test_default_drafter_dir_assembles_once(trained, target, tokens, tmp_path, monkeypatch):
    """The repo-folder path: compact drafter + the target's embeddings -> a cached full checkpoint
    with the exported weights' logits; a second call reuses it; a new repo drafter replaces it."""
    import triforce.runtime.assets
    import triforce.runtime.drafter as distill_module
    out, _ = trained
    compact = tmp_path / "drafters" / distill_module.DEFAULT_BASE
    export_compact(out, compact, target, tokens, **QUIET)
    monkeypatch.setattr(distill_module, "DRAFTERS_DIR", tmp_path / "drafters")
    monkeypatch.setattr(triforce.runtime.assets, "default_model_dir", lambda: target)
    monkeypatch.setenv("TRIFORCE_CACHE", str(tmp_path / "cache"))

    path = distill_module.default_drafter_dir()
    assert path == tmp_path / "cache" / "models" / f"{distill_module.DEFAULT_BASE}-drafter"
    assemble_drafter(compact, target, tmp_path / "by-hand")
    tokens_in = tokens[:40].view(1, 40)
    torch.testing.assert_close(window_logits(load_model(path), tokens_in),
                               window_logits(load_model(tmp_path / "by-hand"), tokens_in), rtol=0, atol=0)
    stamp = (path / "model.safetensors").stat().st_mtime_ns
    assert distill_module.default_drafter_dir() == path
    assert (path / "model.safetensors").stat().st_mtime_ns == stamp  # reused, not rebuilt

    manifest = json.loads((compact / "drafter.json").read_text())
    (compact / "drafter.json").write_text(json.dumps(manifest | {"agreement": 0.99}))  # a newer repo drafter
    assert json.loads((distill_module.default_drafter_dir() / "drafter.json").read_text())["agreement"] == 0.99
