"""`triforce bench`: the smoke suite writes every file, well-formed, on tiny random checkpoints
(random weights: this checks files, not quality); the GPU reproduction settings load and refuse
clearly where they cannot run."""
import json
import shutil

import pytest
import torch

from triforce.runtime.bench import repro
from triforce.runtime.bench.registry import SUITES, get_suite
from triforce.runtime.cli import main
from triforce.runtime.config import RunConfig
from triforce.runtime.errors import UserError

transformers = pytest.importorskip("transformers")

TINY = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512, tie_word_embeddings=True)


def tiny_checkpoint(out, tokenizer_dir, layers: int, seed: int):
    """A tiny random Llama with the default model's tokenizer (so drafter and target share it)."""
    torch.manual_seed(seed)
    vocab = json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]
    cfg = transformers.LlamaConfig(vocab_size=vocab, num_hidden_layers=layers, **TINY)
    transformers.LlamaForCausalLM(cfg).eval().save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, out / name)
    return out


@pytest.fixture(scope="module")
def tiny_pair(default_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    target = tiny_checkpoint(root / "target", default_model_dir, layers=2, seed=0)
    drafter = tiny_checkpoint(root / "drafter", default_model_dir, layers=1, seed=1)
    return target, drafter


EXPECTED_PNGS = ["peers_decode.png", "modes_speedup.png", "modes_acceptance.png"] + \
                [f"ablations_{p}.png" for p in ("budget", "chunk", "gamma1", "gamma2", "temperature", "rebuild")]


def test_smoke_suite_writes_every_file(tiny_pair, tmp_path, capsys):
    target, drafter = tiny_pair
    out = tmp_path / "out"
    assert main(["bench", "--suite", "smoke", "--model", str(target), "--draft-model", str(drafter),
                 "--threads", "1", "--out", str(out)]) == 0
    names = {p.name for p in out.iterdir()}
    for suite in ("smoke", "peers", "modes", "ablations"):
        assert {f"{suite}.json", f"{suite}.md"} <= names, suite
        report = json.loads((out / f"{suite}.json").read_text())
        assert report["machine"]["cpu"] and report["machine"]["torch"] and "gpus" in report["machine"]
        md = (out / f"{suite}.md").read_text()
        assert md.startswith(f"# bench: {suite}") and "|---|" in md, suite
    for png in EXPECTED_PNGS:
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(data) < 100_000, png
    modes = json.loads((out / "modes.json").read_text())
    assert {r["mode"] for r in modes["rows"]} == {"ar", "spec", "retrieval", "streaming", "triforce"}
    for row in modes["rows"]:
        assert row["new_tokens"] == 4 and set(row["ms_per_token"]) == {"median", "min", "max", "all"}
        ms = row["ms_per_token"]
        assert ms["min"] <= ms["median"] <= ms["max"] and len(ms["all"]) == row["repeats"]
        ar = next(r for r in modes["rows"] if r["mode"] == "ar" and r["temperature"] == row["temperature"]
                  and r["context"] == row["context"])
        assert row["speedup_vs_ar"] == pytest.approx(ar["ms_per_token"]["median"] / ms["median"],
                                                     rel=1e-2, abs=5e-4)   # stored to 3 decimals
    triforce = next(r for r in modes["rows"] if r["mode"] == "triforce")
    assert set(triforce["acceptance"]) <= {"retrieval", "target"} and triforce["tokens_per_target_pass"] >= 1
    peers = json.loads((out / "peers.json").read_text())
    assert {r["system"] for r in peers["rows"]} == {"ours ar", "ours triforce", "transformers generate",
                                                    "transformers assisted"}
    ablations = json.loads((out / "ablations.json").read_text())
    assert {r["param"] for r in ablations["rows"]} == set(ablations["sweeps"])
    assert "| peers" not in capsys.readouterr().err


def test_modes_suite_runs_the_budget_generate_picks_unless_one_is_set(tiny_pair, tmp_path):
    """Without --budget the suites measure the retrieval budget `triforce generate` would pick for
    the context (RunConfig.budget_for); each row and the Markdown say which budget ran."""
    target, drafter = tiny_pair
    args = ["bench", "--suite", "modes", "--model", str(target), "--draft-model", str(drafter), "--contexts", "64",
            "--temperatures", "0", "--modes", "ar", "triforce", "--new-tokens", "2", "--repeats", "1", "--threads", "1"]
    for budget, out in ((None, tmp_path / "auto"), (32, tmp_path / "set")):
        assert main(args + (["--budget", str(budget)] if budget else []) + ["--out", str(out)]) == 0
        rows = json.loads((out / "modes.json").read_text())["rows"]
        ar, triforce = (next(r for r in rows if r["mode"] == m) for m in ("ar", "triforce"))
        expected = budget or RunConfig().budget_for(64 + 2)
        assert triforce["budget"] == expected and "budget" not in ar
        assert f"Retrieval budget (tokens): {expected} at 64 tokens of context." in (out / "modes.md").read_text()


def test_every_suite_is_registered_and_unknown_ones_are_refused(capsys):
    assert {"peers", "modes", "ablations", "smoke", "repro", "offload", "ray", "batch"} <= set(SUITES)
    with pytest.raises(UserError, match="unknown bench suite 'nope'; available: .*batch.*ray"):
        get_suite("nope")


@pytest.mark.slow
def test_batch_suite_matches_one_at_a_time(tmp_path, capsys):
    # --middle-weights int8: the middle level a copy on every CPU (auto is the target's own weights
    # where the native int8/int4 kernels do not run, and its passes then count as the target's)
    assert main(["bench", "--suite", "batch", "--contexts", "96", "--new-tokens", "3", "--batch-sizes", "1", "2",
                 "--modes", "ar", "triforce", "--budget", "32", "--repeats", "1", "--middle-weights", "int8",
                 "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "batch.json").read_text())["rows"]
    assert [(r["mode"], r["batch"]) for r in rows] == [("ar", 1), ("ar", 2), ("triforce", 1), ("triforce", 2)]
    assert all(r["same_as_one_at_a_time"] and r["tokens"] == 3 * r["batch"] for r in rows)
    assert "| triforce | 2 |" in capsys.readouterr().out
    for r in rows:   # passes per weights: the target's, and for triforce its lower levels' copies
        assert r["passes"]["target"] == r["target_passes"] and r["packed_rows"]["target"] == r["target_packed_rows"]
        assert r["drafter_passes"] == sum(n for w, n in r["passes"].items() if w.startswith("drafter"))
        assert (r["mode"] == "triforce") == any(w.startswith("middle") and n for w, n in r["passes"].items()), r["passes"]


@pytest.mark.parametrize("name", ["a100", "2x4090", "1x4090"])
def test_repro_settings_load(name):
    setting = repro.load_setting(name)
    assert setting.paper["triforce_ms"] < setting.paper["baseline_ms"]
    assert setting.modes[0] == "ar" and setting.context <= 131072 - setting.new_tokens - 32
    assert setting.run["device"] == "cuda"
    # as many GPUs in use as the paper's figure had: two cards are two shards on the Ray backend
    assert setting.gpus == setting.run.get("tp", 1) * setting.run.get("pp", 1)
    assert (setting.gpus > 1) == (setting.run.get("backend") == "ray")
    run = setting.run_config("T", "D")   # every key is a RunConfig field, with a valid value
    assert {k: getattr(run, k) for k in setting.run} == setting.run and run.max_new_tokens == setting.new_tokens


def test_repro_refuses_missing_checkpoints_and_cpu(tmp_path, capsys, default_model_dir):
    assert main(["bench", "--suite", "repro", "--setting", "a100", "--target", str(tmp_path / "nope"),
                 "--draft", str(default_model_dir)]) == 2
    assert "--target" in capsys.readouterr().err
    assert main(["bench", "--suite", "repro", "--setting", "h100"]) == 2
    assert "a100" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["bench", "--suite", "repro", "--setting", "a100", "--target", str(default_model_dir),
                     "--draft", str(default_model_dir)]) == 2
        assert "CUDA" in capsys.readouterr().err


def test_paired_speedup_is_the_median_of_per_repeat_ratios():
    from triforce.runtime.bench.suites import paired_speedup, speedup
    # repeat i of each mode ran side by side; the host was slow for ar's 2nd and 3rd repeats and
    # for triforce's 3rd: per pair the ratios are 2, 3, 1.5, whatever the medians say
    ar = dict(ms_per_token=dict(median=30.0, all=[10.0, 30.0, 30.0]))
    tf = dict(ms_per_token=dict(median=10.0, all=[5.0, 10.0, 20.0]))
    assert paired_speedup(ar, tf) == 2.0
    assert speedup(ar["ms_per_token"]["median"], tf["ms_per_token"]["median"]) == 3.0
    assert paired_speedup(None, tf) is None


def test_rows_of_gamma_auto_runs_pool_the_choices_of_every_repeat():
    from triforce.runtime.bench.measure import summarize
    from triforce.runtime.config import RunConfig

    def stats(ms, probe_s, rounds):
        level = dict(drafted=4, accepted=3, seconds=0.1, rebuilds=0)
        return dict(ms_per_token=ms, prefill_s=0.5, decode_s=ms * 8 / 1000, new_tokens=8, target_passes=2, levels=dict(target=level),
                    gamma=dict(probe_s=probe_s, rounds_per_choice=rounds, pass_ms={"target": {"1": 20.0, "6": 31.0}}))

    row = summarize(RunConfig(mode="triforce"), [1, 2, 3],
                    [stats(10.0, 0.3, {"1,4": 2, "1,3": 1}), stats(12.0, 0.5, {"1,3": 2})], 0.5)
    assert row["gamma"]["rounds_per_choice"] == {"1,3": 3, "1,4": 2}
    assert row["gamma"]["probe_s"]["all"] == [0.3, 0.5] and row["gamma"]["pass_ms"]["target"]["6"] == 31.0
    assert row["request_s"]["all"] == [0.88, 1.096]          # own prefill + probe + decode, per repeat
    assert "ceiling_vs_ar" not in row["gamma"]                # stats from before the tuner reported its bound
    with_bound = [stats(10.0, 0.3, {"1,4": 2}), stats(12.0, 0.5, {"1,3": 2})]
    for s, (free, right) in zip(with_bound, ((16.0, 8.0), (10.0, 5.0))):
        s["gamma"].update(target_alone_ms_per_token=20.0, ceiling=dict(free_drafts_ms_per_token=free, right_drafts_ms_per_token=right))
    row = summarize(RunConfig(mode="triforce"), [1, 2, 3], with_bound, 0.5)
    assert row["gamma"]["ceiling_vs_ar"] == {"free_drafts": 1.625, "right_drafts": 3.25}   # medians of 1.25, 2.0 / 2.5, 4.0
    from triforce.runtime.bench.suites import table_modes
    row.update(context=3, speedup_vs_ar=None)
    assert "3 T = 0.0 triforce 1.62x / 3.25x" in table_modes(dict(rows=[row]))
    fixed = {k: v for k, v in stats(20.0, 0.0, {}).items() if k != "gamma"}   # a fixed γ reports no choice
    row = summarize(RunConfig(mode="triforce"), [1, 2, 3], [fixed], 0.5)
    assert "gamma" not in row and row["request_s"]["all"] == [0.66]


def test_lower_suite_measures_a_middle_level_against_the_target(tiny_pair, tmp_path, capsys):
    """Teacher-forced: with the whole context in the retrieval budget, the target's own weights
    agree with it everywhere (agreement and expected acceptance 1); a quantized copy is a
    probability; LAYERS:HEAD names the head's kind, and an unknown kind is refused up front."""
    target, _ = tiny_pair
    args = ["bench", "--suite", "lower", "--model", str(target), "--contexts", "64", "--budget", "64",
            "--new-tokens", "6", "--temperatures", "0", "0.6", "--dtypes", "fp32", "--threads", "1"]
    assert main(args + ["--lower-weights", "same", "int8:int4", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "lower.json").read_text())["rows"]
    assert [(r["temperature"], r["weights"]) for r in rows] == [(0.0, "same"), (0.0, "int8:int4"),
                                                                 (0.6, "same"), (0.6, "int8:int4")]
    for r in rows:
        assert 0 <= r["greedy_agreement"] <= 1 and 0 <= r["expected_acceptance"] <= 1 + 1e-6
        assert 0 <= r["sure_share"] <= 1 and (r["sure_acceptance"] is None) == (r["sure_share"] == 0)
        assert (r["unsure_acceptance"] is None) == (r["sure_share"] == 1)
        kept = r["greedy_agreement"] if r["temperature"] == 0 else r["expected_acceptance"]
        assert r["acceptance_by_position"] == {"0-31": pytest.approx(kept, abs=1e-4)}   # 6 tokens: the first stretch only
        if r["weights"] == "same":
            assert r["greedy_agreement"] == 1 and r["expected_acceptance"] == pytest.approx(1, abs=1e-4)
            assert all(a is None or a == pytest.approx(1, abs=1e-4) for a in (r["sure_acceptance"], r["unsure_acceptance"]))
    assert rows[1]["weight_bytes"] < rows[0]["weight_bytes"]
    assert "| 64 | 0.6 | int8:int4 |" in capsys.readouterr().out
    assert main(args + ["--lower-weights", "int3"]) == 2
    assert "weights 'int3' is not one of same, int8, int4" in capsys.readouterr().err
