"""The embedded default model (SmolLM2-135M-Instruct, real weights) against transformers, and
generation on it. Short prompts and few tokens keep this fast; long contexts live in benchmarks."""
import json

import pytest
import torch

from triforce.runtime.cache_full import FullCache
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.sampling import SamplingParams
from triforce.runtime.speculate import Level
from triforce.runtime.model import load_model

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def kjv_ids(default_model_dir):
    from triforce.runtime.assets import kjv_books
    tok = transformers.AutoTokenizer.from_pretrained(str(default_model_dir))
    return tok.encode(kjv_books(["Ruth"]))[:1100]  # >= 1,000 tokens of real text


@pytest.fixture(scope="module")
def ours(default_model_dir):
    return load_model(default_model_dir, "fp32")


def new_cache(model, capacity):
    return FullCache(model.cfg, model.rope(capacity), 1, capacity, model.device, model.dtype)


@pytest.mark.slow   # ~10 s: 1100 tokens through transformers' model too
def test_logits_match_transformers_on_1100_kjv_tokens(default_model_dir, ours, kjv_ids):
    hf = transformers.LlamaForCausalLM.from_pretrained(str(default_model_dir), dtype=torch.float32).eval()
    tokens = torch.tensor([kjv_ids])
    with torch.inference_mode():
        ref = hf(tokens).logits
    got = ours(tokens, new_cache(ours, len(kjv_ids)))
    rel = ((got - ref).abs().max() / ref.abs().max()).item()
    assert rel < 1e-4, f"max relative error {rel:.2e}"
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean().item() > 0.999


@pytest.mark.slow   # ~10 s
def test_chunked_prefill_then_decode_equals_one_forward(ours, kjv_ids):
    ids = torch.tensor([kjv_ids])                     # [1, 1100]
    whole = ours(ids, new_cache(ours, ids.shape[1]))  # [1, 1100, V]
    cache = new_cache(ours, ids.shape[1])
    level = Level("target", ours, cache, SamplingParams(), max_pass=256)
    last = level.feed(kjv_ids[:1090], keep_last=1)  # 4 full chunks + a ragged one
    torch.testing.assert_close(last, whole[0, 1089:1090], rtol=1e-4, atol=1e-4)
    steps = torch.cat([ours(ids[:, t:t + 1], cache) for t in range(1090, 1100)], dim=1)
    torch.testing.assert_close(steps, whole[:, 1090:], rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def engine(default_model_dir):
    return Engine(RunConfig(model=str(default_model_dir)))


def test_greedy_generation_is_coherent_and_matches_transformers(engine, default_model_dir):
    run = RunConfig(model=str(default_model_dir), max_new_tokens=12)
    ids = engine.encode("The capital of France is")
    result = engine.generate(ids, run)
    assert "Paris" in result.text
    hf = transformers.LlamaForCausalLM.from_pretrained(str(default_model_dir), dtype=torch.float32).eval()
    ref = hf.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
    n = len(result.token_ids)
    assert result.token_ids == ref[:n]


def test_sampling_is_seeded_and_reproducible(engine, default_model_dir):
    ids = engine.encode("In the beginning")
    runs = [RunConfig(model=str(default_model_dir), max_new_tokens=8, temperature=0.8, top_p=0.9, seed=s)
            for s in (1, 1, 2)]
    a, b, c = (engine.generate(ids, r).token_ids for r in runs)
    assert a == b
    assert a != c  # a different seed gives a different continuation (holds for these seeds)


def test_stops_on_eos(engine, default_model_dir):
    ids = engine.encode("What is 2+2? Answer with one number.", chat=True)
    result = engine.generate(ids, RunConfig(model=str(default_model_dir), max_new_tokens=40))
    assert result.stopped_by == "eos"
    assert result.token_ids[-1] in engine.cfg.eos_token_ids + (engine.tokenizer.eos_token_id,)
    assert len(result.token_ids) < 40


def test_tokenizer_is_what_autotokenizer_builds(default_model_dir):
    """load_tokenizer skips AutoTokenizer's config lookups for a plain tokenizer.json checkpoint
    (2 s of start-up): the same class, ids, chat prompt and text as AutoTokenizer's."""
    from triforce.runtime.assets import kjv_books
    from triforce.runtime.drafter import default_drafter_dir
    from triforce.runtime.engine import encode, load_tokenizer, plain_fast_tokenizer

    text = kjv_books(["Jonah"])[:6000] + " naïve café — 3.14 <|im_end|>\n\n\tend"
    for model_dir in (default_model_dir, default_drafter_dir()):
        assert plain_fast_tokenizer(model_dir)
        ours, auto = load_tokenizer(model_dir), transformers.AutoTokenizer.from_pretrained(str(model_dir))
        assert type(ours) is type(auto)
        ids = encode(ours, model_dir, text)
        assert len(ids) > 1000 and ids == encode(auto, model_dir, text)
        assert encode(ours, model_dir, text, chat=True) == encode(auto, model_dir, text, chat=True)
        assert ours.decode(ids, skip_special_tokens=True) == auto.decode(ids, skip_special_tokens=True)
        assert ours.all_special_ids == auto.all_special_ids and ours.get_vocab() == auto.get_vocab()


def test_tokenizer_of_another_class_goes_through_autotokenizer(tmp_path, default_model_dir):
    import shutil
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(default_model_dir / name, tmp_path / name)
    from triforce.runtime.engine import plain_fast_tokenizer
    assert plain_fast_tokenizer(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(dict(config, tokenizer_class="GPT2Tokenizer")))
    assert not plain_fast_tokenizer(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text("{not json")
    assert not plain_fast_tokenizer(tmp_path)
