"""`triforce generate`: the contract users script against, and one clear line for each bad input."""
import json

import pytest

from triforce.runtime.cli import main


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, err, *needles):
    assert code == 2
    assert "Traceback" not in err
    line = [l for l in err.splitlines() if l.startswith("triforce: error:")]
    assert len(line) == 1, err
    for needle in needles:
        assert needle in line[0], line[0]


def test_generate_streams_text_and_writes_json(capsys, tmp_path, default_model_dir):
    out_json = tmp_path / "r.json"
    code, out, err = run_cli(capsys, "generate", "--prompt", "The capital of France is",
                             "--max-new-tokens", "6", "--json", str(out_json))
    assert code == 0
    result = json.loads(out_json.read_text())
    assert {"model_path", "mode", "prompt_tokens", "token_ids", "text", "stats"} <= set(result)
    assert {"prefill_s", "decode_s", "tokens_per_s"} <= set(result["stats"])
    assert result["model_path"] == str(default_model_dir)
    assert result["mode"] == "ar" and result["prompt_tokens"] == 5
    assert 1 <= len(result["token_ids"]) <= 6
    assert result["text"].strip() and result["text"].strip() in out  # streamed to stdout
    assert "decode" in err and "tok/s" in err                          # figures on stderr


def test_config_file_fills_flags_and_flags_override(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_new_tokens: 3\ntemperature: 0.0\nprompt: Hello\n")
    out_json = tmp_path / "r.json"
    code, _, _ = run_cli(capsys, "generate", "--config", str(cfg), "--max-new-tokens", "2",
                         "--json", str(out_json))
    assert code == 0
    result = json.loads(out_json.read_text())
    assert len(result["token_ids"]) == 2 and result["stopped_by"] == "max_new_tokens"  # the flag, not the file's 3


@pytest.mark.parametrize("argv, needles", [
    (["--model", "/nonexistent/dir", "--prompt", "x"], ["/nonexistent/dir", "does not exist"]),
    (["--prompt-file", "/nonexistent/p.txt"], ["/nonexistent/p.txt"]),
    (["--prompt", "   "], ["prompt is empty"]),
    (["--prompt", "x", "--temperature", "-1"], ["temperature", "-1"]),
    (["--prompt", "x", "--top-p", "1.5"], ["top_p", "1.5"]),
    (["--prompt", "x", "--top-k", "-3"], ["top_k", "-3"]),
    (["--prompt", "x", "--max-new-tokens", "0"], ["max_new_tokens", "0"]),
    (["--prompt", "x", "--rope-scaling", "cubic:2"], ["cubic:2"]),
    ([], ["no prompt"]),
])
def test_bad_input_gets_one_clear_line(capsys, argv, needles):
    code, _, err = run_cli(capsys, "generate", *argv)
    assert_user_error(code, err, *needles)


def test_model_dir_problems(capsys, tmp_path):
    code, _, err = run_cli(capsys, "generate", "--model", str(tmp_path), "--prompt", "x")
    assert_user_error(code, err, "config.json")
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["BertForMaskedLM"]}))
    code, _, err = run_cli(capsys, "generate", "--model", str(tmp_path), "--prompt", "x")
    assert_user_error(code, err, "BertForMaskedLM", "not supported")


def test_unreadable_prompt_file(capsys, tmp_path):
    bad = tmp_path / "bin.txt"
    bad.write_bytes(b"\xff\xfe\x00\xc3")
    code, _, err = run_cli(capsys, "generate", "--prompt-file", str(bad))
    assert_user_error(code, err, str(bad), "UTF-8")


def test_unknown_config_key(capsys, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_new_tokenz: 3\n")
    code, _, err = run_cli(capsys, "generate", "--config", str(cfg), "--prompt", "x")
    assert_user_error(code, err, "max_new_tokenz")


def test_prompt_longer_than_the_model_says_the_limit_and_the_fix(capsys, tmp_path, default_model_dir):
    long = tmp_path / "long.txt"
    long.write_text("and it came to pass " * 2500)  # ~10K tokens > 8,192 positions
    code, _, err = run_cli(capsys, "generate", "--prompt-file", str(long))
    assert_user_error(code, err, "8192", "--rope-scaling")


@pytest.mark.slow
def test_prompt_cache_serves_another_question_over_the_same_document(capsys, tmp_path, default_model_dir):
    """--prompt-cache: a second run whose prompt starts as the first one's (a document, then another
    question) copies the document's prefill from the file in whole passes; its tokens are those of a
    run without the file. A file made with other settings is replaced (one line says so); a file that
    is not a prompt cache is refused, untouched."""
    from triforce.runtime.assets import kjv_books
    doc = " ".join(kjv_books(["Ruth"]).split()[:300])
    cache, plain_json, cached_json = tmp_path / "doc.kv", tmp_path / "plain.json", tmp_path / "cached.json"
    common = ["--max-new-tokens", "4", "--prefill-chunk", "64", "--quiet"]
    code, _, _ = run_cli(capsys, "generate", "--prompt", doc + "\n\nWho was Ruth?", "--prompt-cache", str(cache), *common)
    assert code == 0 and cache.is_file()
    second = doc + "\n\nWhere did Naomi go?"
    assert run_cli(capsys, "generate", "--prompt", second, "--json", str(plain_json), *common)[0] == 0
    assert run_cli(capsys, "generate", "--prompt", second, "--prompt-cache", str(cache), "--json", str(cached_json),
                   *common)[0] == 0
    plain, cached = (json.loads(p.read_text()) for p in (plain_json, cached_json))
    assert cached["token_ids"] == plain["token_ids"]
    assert plain["stats"]["prefill_reused"] == 0
    assert cached["stats"]["prefill_reused"] >= 64 * 5 and cached["stats"]["prefill_reused"] % 64 == 0

    code, _, err = run_cli(capsys, "generate", "--prompt", second, "--prompt-cache", str(cache), *common[:2],
                           "--prefill-chunk", "32", "--quiet")
    assert code == 0 and "was made with another prefill_chunk" in err   # passes of another size: other bits
    code, _, err = run_cli(capsys, "generate", "--prompt", second, "--prompt-cache", str(cache), "--dtype", "bf16", *common)
    assert code == 0 and "was made with another dtype" in err           # replaced by this run's bf16 prefill
    code, _, err = run_cli(capsys, "generate", "--prompt", second, "--prompt-cache", str(cache), "--dtype", "bf16",
                           "--json", str(cached_json), *common)
    assert code == 0 and "another" not in err and json.loads(cached_json.read_text())["stats"]["prefill_reused"] > 0

    code, _, err = run_cli(capsys, "generate", "--prompt", second, "--prompt-cache", str(tmp_path / "no" / "dir.kv"),
                           "--json", str(plain_json), *common)
    assert_user_error(code, err, "cannot write --prompt-cache", "dir.kv")   # after the result is written
    assert json.loads(plain_json.read_text())["token_ids"] == plain["token_ids"]

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    code, _, err = run_cli(capsys, "generate", "--prompt", second, "--prompt-cache", str(notes), *common)
    assert_user_error(code, err, "notes.txt", "is not a triforce prompt cache")
    assert notes.read_text() == "my notes"
