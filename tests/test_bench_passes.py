"""`triforce bench --suite passes` (the roofline instrument) and the prompt options every suite
shares, on tiny random checkpoints (this checks the accounting and the files, not speed)."""
import json
from pathlib import Path

import pytest

from triforce.runtime.bench.measure import pass_cost, weight_bytes_and_params
from triforce.runtime.cli import main
from triforce.runtime.config import ModelConfig
from triforce.runtime.model import load_model, plan_kernels

from test_bench import tiny_pair  # noqa: F401 -- the module-scoped fixture


def test_passes_suite_rows_follow_the_roofline_accounting(tiny_pair, tmp_path):  # noqa: F811
    target, drafter = tiny_pair
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("It was a bright cold day in April, and the clocks were striking thirteen. " * 40)
    out = tmp_path / "out"
    assert main(["bench", "--suite", "passes", "--model", str(target), "--draft-model", str(drafter),
                 "--contexts", "96", "--pass-tokens", "1", "3", "--budget", "32", "--repeats", "1",
                 "--dtypes", "fp32", "--threads", "1", "--prompt-file", str(prompt), "--out", str(out)]) == 0
    report = json.loads((out / "passes.json").read_text())
    assert report["prompt"] == str(prompt) and report["read_bandwidth_gbs"] > 0 and report["matmul_peak_gflops"] > 0
    rows = {(r["level"], r["T"]): r for r in report["rows"]}
    assert set(rows) == {(lv, t) for lv in ("target", "retrieval", "drafter") for t in (1, 3)}
    assert rows["target", 1]["kv_tokens"] == 96
    assert rows["retrieval", 1]["kv_tokens"] == 32            # the budget, selected from the 96
    assert rows["drafter", 1]["kv_tokens"] == 96               # the context (< --draft-sinks + --draft-window)
    model = load_model(target)
    cfg = ModelConfig.from_dir(target)
    weights, params = weight_bytes_and_params(model)
    kv = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 96 * 4
    assert rows["target", 3]["bytes"] == weights + kv == pass_cost(model, 96, 3)[0]
    assert rows["target", 3]["flops"] == 2 * params * 3 + 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * 96 * 3
    for r in report["rows"]:
        roof = max(r["bytes"] / report["read_bandwidth_gbs"] / 1e6, r["flops"] / report["matmul_peak_gflops"] / 1e6)
        assert r["roofline_ms"] == pytest.approx(roof, rel=1e-2, abs=2e-3)
        assert r["x_roofline"] == pytest.approx(r["ms"] / r["roofline_ms"], rel=0.05)
        assert len(r["ms_all"]) == 1 and r["ms_all"][0] == pytest.approx(r["ms"], abs=1e-3)   # every repeat kept
        # the bandwidth read around the row, and the row against the roofline at it
        paired = max(r["bytes"] / r["paired_read_gbs"] / 1e6, r["flops"] / report["matmul_peak_gflops"] / 1e6)
        assert r["paired_read_gbs"] > 0 and r["x_roofline_paired"] == pytest.approx(r["ms"] / paired, rel=0.05, abs=0.01)
    if plan_kernels() is not None:   # the layers run in one native call here: their stages are timed
        for r in report["rows"]:
            stages = r["stages_ms"]
            assert list(stages) == ["norms", "qkv", "attention", "o", "gate_up", "silu_mul", "down"]
            assert all(v >= 0 for v in stages.values()) and stages["attention"] > 0 and stages["qkv"] > 0
            assert sum(stages.values()) <= r["ms"] * 1.5   # the layers are part of the pass (passes vary: warm-ups counted)
    assert "x roofline (paired)" in (out / "passes.md").read_text()
    assert (out / "passes_ms.png").read_bytes()[:4] == b"\x89PNG"


def test_a_prompt_file_too_short_or_missing_is_one_line(tiny_pair, tmp_path, capsys):  # noqa: F811
    target, drafter = tiny_pair
    short = tmp_path / "short.txt"
    short.write_text("too short")
    args = ["bench", "--suite", "passes", "--model", str(target), "--draft-model", str(drafter),
            "--contexts", "96", "--repeats", "1", "--dtypes", "fp32"]
    assert main(args + ["--prompt-file", str(short)]) == 2
    assert "gives only" in capsys.readouterr().err
    assert main(args + ["--prompt-file", str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt" in capsys.readouterr().err


def test_essays_corpus_is_not_the_kjv():
    from triforce.runtime.assets import essays_text
    text = essays_text()
    assert len(text) > 500_000 and "LORD" not in text[:100_000]


def test_peers_adds_llama_cpp_when_given_a_binary_and_a_gguf(tiny_pair, tmp_path):  # noqa: F811
    target, drafter = tiny_pair
    fake = tmp_path / "llama-bench"   # prints what llama-bench -o json prints, and its arguments
    fake.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\n"
                    "echo '[{\"n_prompt\": 0, \"n_gen\": 2, \"n_depth\": 64, \"flash_attn\": 0, \"avg_ts\": 50.0, "
                    "\"samples_ts\": [40.0, 50.0, 62.5]}, {\"n_prompt\": 0, \"n_gen\": 2, \"n_depth\": 64, "
                    "\"flash_attn\": 1, \"avg_ts\": 25.0, \"samples_ts\": [25.0]}]'\n")
    fake.chmod(0o755)
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    out = tmp_path / "out"
    assert main(["bench", "--suite", "peers", "--model", str(target), "--draft-model", str(drafter),
                 "--context", "64", "--new-tokens", "2", "--repeats", "1", "--dtypes", "bf16", "--temperatures", "0",
                 "--threads", "1", "--bandwidth-mb", "16", "--llama-bench", str(fake), "--gguf", str(gguf),
                 "--out", str(out)]) == 0
    rows = {r["system"]: r for r in json.loads((out / "peers.json").read_text())["rows"]}
    llama = rows["llama.cpp"]
    assert llama["ms_per_token"]["median"] == 20.0 and llama["ms_per_token"]["min"] == 16.0   # the faster setting
    assert llama["flash_attn"] == 0 and llama["tokens_per_s_by_flash_attn"] == {"0": 50.0, "1": 25.0}
    assert llama["speedup_vs_ar"] == pytest.approx(rows["ours ar"]["ms_per_token"]["median"] / 20.0, rel=1e-2, abs=1e-3)  # stored to 3 decimals
    args = (tmp_path / "args").read_text().split()
    assert args[args.index("-d") + 1] == "64" and args[args.index("-t") + 1] == "1" and "-o" in args
    assert args[args.index("-fa") + 1] == "0,1"
    assert "llama.cpp" in (out / "peers.md").read_text()


def test_passes_on_random_weights_of_an_architecture(tmp_path, monkeypatch):
    """--model / --draft-model FILE.json: random weights of that shape (timing only), written once
    and reused, with random prompt ids; the report says so. A file that is not there is one line."""
    from triforce.runtime.bench.random_weights import MARK, model_arg
    monkeypatch.setenv("TRIFORCE_CACHE", str(tmp_path / "cache"))
    shape = dict(architectures=["LlamaForCausalLM"], vocab_size=300, intermediate_size=64, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0)
    (tmp_path / "t.json").write_text(json.dumps(dict(shape, hidden_size=32, num_hidden_layers=2)))
    (tmp_path / "d.json").write_text(json.dumps(dict(shape, hidden_size=16, num_hidden_layers=1)))
    out = tmp_path / "out"
    assert main(["bench", "--suite", "passes", "--model", str(tmp_path / "t.json"), "--draft-model",
                 str(tmp_path / "d.json"), "--contexts", "96", "--pass-tokens", "1", "2", "--budget", "32",
                 "--repeats", "1", "--dtypes", "fp32", "--threads", "1", "--out", str(out)]) == 0
    report = json.loads((out / "passes.json").read_text())
    assert report["weights"] == "random (timing only)" and report["device"] == "cpu"
    assert {(r["level"], r["T"]) for r in report["rows"]} == {(lv, t) for lv in ("target", "retrieval", "drafter")
                                                             for t in (1, 2)}
    assert "Weights: random" in (out / "passes.md").read_text()
    written = model_arg(str(tmp_path / "t.json"))
    assert (tmp_path / "cache" / "random").exists() and (Path(written) / MARK).is_file()
    stamp = (Path(written) / "model.safetensors").stat().st_mtime_ns
    assert model_arg(str(tmp_path / "t.json")) == written                               # reused, not rewritten
    assert (Path(written) / "model.safetensors").stat().st_mtime_ns == stamp
    assert main(["bench", "--suite", "passes", "--model", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "bad.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 32}))
    assert main(["bench", "--suite", "passes", "--model", str(tmp_path / "bad.json")]) == 2
    assert sorted(p.name for p in (tmp_path / "cache" / "random").iterdir()) == sorted(   # nothing half-written
        [Path(written).name, Path(model_arg(str(tmp_path / "d.json"))).name])
