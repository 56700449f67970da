"""Every mode on the real default model (fp32, greedy; and bf16 on the CPU kernels) emits exactly the tokens of `ar`: prompts
whose lengths are not multiples of the chunk size, and generations that cross retrieval rebuilds.
The drafter here is the target's first 4 layers (undistilled): a poor but honest drafter, which
exercises rejections at every level."""
import copy
import json
import shutil

import pytest

from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.errors import UserError
from triforce.runtime.modes import mode_levels

MODES = ["spec", "retrieval", "streaming", "triforce"]


def test_mode_table_is_data():
    """The one description every backend builds from (runtime/modes.py)."""
    run = RunConfig(gamma1=2, gamma2=6, max_new_tokens=100, retrieval_budget=1024, chunk_size=8, draft_sinks=16,
                    draft_window=240, prefill_chunk=512)
    table = {mode: mode_levels(RunConfig(**{**run.__dict__, "mode": mode}), 5000) for mode in ["ar", *MODES]}
    assert {m: ([(s.name, s.model, s.cache.kind) for s in specs], g) for m, (specs, g) in table.items()} == {
        "ar": ([("target", "target", "full")], []),
        "spec": ([("drafter", "drafter", "streaming"), ("target", "target", "full")], [6]),
        "retrieval": ([("retrieval", "target", "retrieval"), ("target", "target", "full")], [6]),
        "streaming": ([("streaming", "target", "streaming"), ("target", "target", "full")], [6]),
        "triforce": ([("drafter", "drafter", "streaming"), ("retrieval", "target", "retrieval"),
                      ("target", "target", "full")], [2, 6])}
    drafter, retrieval, target = table["triforce"][0]
    assert (drafter.cache.sinks, drafter.cache.window, drafter.cache.scratch, drafter.max_pass) == (16, 240, 10, 120)
    assert drafter.cache.positions == 16 + 240 + 2 + 6 + 2          # sinks + window + gamma1 + gamma2 + 2
    assert (retrieval.cache.budget, retrieval.cache.generated, retrieval.max_pass) == (1024, 100 + 6 + 2, 512)
    assert (target.cache.capacity, target.cache.positions, target.max_pass) == (5000, 5000, 512)
    streaming = table["streaming"][0][0]                             # the budget's size, sinks capped at half
    assert (streaming.cache.sinks, streaming.cache.window, streaming.max_pass) == (16, 1008, 504)


def test_retrieval_budget_follows_the_context_unless_set():
    """Unset, the middle level's budget is twice the paper's share of the context (4K of 60K) in
    whole chunks, between 1,024 and 4,096; set, it is what was set; a chunk size whose two chunks
    do not fit the smallest automatic budget is refused."""
    auto = RunConfig(chunk_size=8)
    assert [auto.budget_for(n) for n in (0, 7_000, 16_000, 32_000, 64_000, 500_000)] == [1024, 1024, 1088, 2184, 4096, 4096]
    assert RunConfig(chunk_size=48).budget_for(32_000) == 2160                # a whole number of chunks
    assert RunConfig(retrieval_budget=512).budget_for(32_000) == 512
    specs, _ = mode_levels(RunConfig(mode="triforce"), 32_000)
    assert specs[1].cache.budget == 2184 and specs[1].cache.recent == 256
    with pytest.raises(UserError, match="retrieval_budget 600 must hold at least two chunks of chunk_size 600"):
        RunConfig(chunk_size=600).validate()


@pytest.fixture(scope="module")
def engine(default_model_dir, cut_drafter):
    return Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter)))


@pytest.fixture(scope="module")
def kjv_ids(engine):
    from triforce.runtime.assets import kjv_books
    return engine.tokenizer.encode(kjv_books(["Jonah"]))


def run(engine, ids, mode, **kw):
    base = dict(model=str(engine.model_dir), draft_model=str(engine.draft_dir), mode=mode, max_new_tokens=40,
                retrieval_budget=96, chunk_size=8, draft_sinks=4, draft_window=60, gamma1=2, gamma2=4,
                retrieval_rebuild="every:16")
    return engine.generate(ids, RunConfig(**{**base, **kw}))


def test_drafter_prefill_feeds_only_what_its_streaming_cache_keeps(engine, kjv_ids):
    """At prefill the drafter's StreamingLLM cache is fed its sinks and its window alone (4 + 60 of
    the prompt's 516 context tokens here), and then holds the sequence as one fed every token."""
    run_config = RunConfig(model=str(engine.model_dir), draft_model=str(engine.draft_dir), mode="triforce",
                           max_new_tokens=8, retrieval_budget=96, chunk_size=8, draft_sinks=4, draft_window=60)
    stack, _ = engine.build_stack(run_config, 517 + 8)
    drafter = stack[0]
    passes = []
    feed = drafter.feed
    drafter.feed = lambda seq, keep_last=0: passes.append(len(seq)) or feed(seq, keep_last)
    engine.prefill(stack, kjv_ids[:517], None)
    assert drafter.cached == kjv_ids[:516] and drafter.cache.get_seq_length() == 516
    assert drafter.cache.length == 64 and drafter.cache.evicted == 516 - 64
    assert passes[0] == 4 and all(n > 516 - 60 for n in passes[1:])   # the sinks, then the window only


@pytest.mark.slow
@pytest.mark.parametrize("prompt_len", [203, 517])
def test_every_mode_equals_ar_greedy(engine, kjv_ids, prompt_len):
    ids = kjv_ids[:prompt_len]
    expected = run(engine, ids, "ar").token_ids
    assert len(expected) == 40
    for mode in MODES:
        result = run(engine, ids, mode)
        assert result.token_ids == expected, mode
        levels = result.stats["levels"]
        assert levels["target"]["drafted"] > 0, mode             # the target really verified drafts
        if mode in ("retrieval", "triforce"):
            assert levels["retrieval"]["rebuilds"] >= 2, mode   # 40 tokens cross rebuilds every 16


@pytest.mark.slow
def test_every_mode_equals_ar_greedy_in_bf16(default_model_dir, cut_drafter, kjv_ids):
    """In bf16 too, on the CPU kernels: a T-token verify pass gives bitwise the logits of T 1-token
    passes (packed linears, attention and glue are row-invariant, and the one-call path equals the
    module path), so speculation cannot flip a near-tie. Quantized lower levels included."""
    from triforce.runtime.model import decoder_plan
    bf16 = Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter), dtype="bf16"))
    if decoder_plan(bf16.model) is None:
        pytest.skip("the native bf16 kernels did not build here (torch's GEMM rounds by row count)")
    ids = kjv_ids[:203]
    expected = run(bf16, ids, "ar", dtype="bf16").token_ids
    for mode in MODES:
        for lower in ({}, dict(middle_weights="int8", draft_weights="int4")):
            assert run(bf16, ids, mode, dtype="bf16", **lower).token_ids == expected, (mode, lower)


@pytest.mark.slow
def test_levels_fill_from_the_target_and_a_saved_prefill(engine, kjv_ids, monkeypatch):
    """Levels on the target's weights fill their caches from its full cache (cache.fill_from), and
    with keep_prefill a later request with the same prompt fills the target from the saved one:
    only the drafter runs prefill passes, and the tokens are those of a plain prefill."""
    ids, passes, plain = kjv_ids[:203], [], Engine._prefill_passes
    expected = {mode: run(engine, ids, mode, max_new_tokens=12).token_ids for mode in ("triforce", "streaming")}
    saving = copy.copy(engine)
    saving.keep_prefill, saving._prefill_memo = True, None
    run(saving, ids, "ar", max_new_tokens=1)                                  # saves the target's prefill
    monkeypatch.setattr(Engine, "_prefill_passes", staticmethod(lambda level, *a: passes.append(level.name)
                                                                or plain(level, *a)))
    for mode, on_chip in (("triforce", None), ("triforce", 11), ("streaming", None)):
        assert run(saving, ids, mode, max_new_tokens=12, on_chip_layers=on_chip).token_ids == expected[mode], mode
    assert passes == ["drafter", "drafter"]


def test_a_prompt_that_starts_as_the_saved_one_copies_whole_prefill_passes_bit_for_bit(engine, kjv_ids):
    """keep_prefill and a prompt that starts as the saved one (one document, another question):
    the positions the two share are copied in whole prefill passes and this prompt's own passes run
    from there, so the target's cache holds bit for bit what a prefill from scratch writes (and each
    layer's last query, which the retrieval cache scores with); the tokens are the same and stats
    say how many positions were copied. Passes of 96 tokens take the prefill items (G*T > 256)."""
    import torch
    chunk, doc = 96, kjv_ids[:250]
    first, second = doc + kjv_ids[300:330], doc + kjv_ids[400:417]
    shared = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    expected_reused = min(shared, len(second) - 2) // chunk * chunk      # prefill holds the prompt but its last token
    assert expected_reused == 192

    def prefilled(eng, ids):
        cfg = RunConfig(model=str(eng.model_dir), draft_model=str(eng.draft_dir), mode="triforce", prefill_chunk=chunk,
                        retrieval_budget=96, chunk_size=8, draft_sinks=4, draft_window=60, max_new_tokens=8)
        stack, _ = eng.build_stack(cfg, cfg.capacity_for(len(ids)))
        reused = eng.prefill(stack, ids, None)
        cache = stack[-1].cache
        return reused, [cache.layer_kv(layer) for layer in range(eng.cfg.num_layers)], cache.last_query.clone()

    fresh, saving = copy.copy(engine), copy.copy(engine)
    fresh.keep_prefill, fresh._prefill_memo = False, None
    saving.keep_prefill, saving._prefill_memo = True, None
    _, expected_kv, expected_query = prefilled(fresh, second)
    assert prefilled(saving, first)[0] == 0                                # nothing saved yet: all passes
    reused, kv, query = prefilled(saving, second)
    assert reused == expected_reused
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(kv, expected_kv))
    assert torch.equal(query, expected_query)
    assert prefilled(saving, second)[0] == len(second) - 1                 # the same prompt again: all copied
    saving.forget_prefill()                                                # (the modes suite, at each context)
    assert prefilled(saving, second)[0] == 0

    expected = run(fresh, second, "triforce", max_new_tokens=12, prefill_chunk=chunk)
    run(saving, first, "triforce", max_new_tokens=12, prefill_chunk=chunk)
    result = run(saving, second, "triforce", max_new_tokens=12, prefill_chunk=chunk)
    assert result.token_ids == expected.token_ids
    assert (result.stats["prefill_reused"], expected.stats["prefill_reused"]) == (expected_reused, 0)


def test_a_saved_prefill_is_taken_in_place_and_left_whole(engine, kjv_ids):
    """keep_prefill: a later request with room runs on the saved prefill's cache itself (nothing
    allocated, nothing copied) and leaves it whole: cropped to its prompt and holding the prefill's
    last query, not the decode's, so that the next request and export_prefill see the prefill.
    A request that needs more room allocates its own cache, copies, and is saved in its place."""
    import torch
    ids = kjv_ids[:203]
    fresh, saving = copy.copy(engine), copy.copy(engine)
    fresh.keep_prefill, fresh._prefill_memo = False, None
    saving.keep_prefill, saving._prefill_memo = True, None
    expected = run(fresh, ids, "triforce", max_new_tokens=12).token_ids
    assert run(saving, ids, "triforce", max_new_tokens=12).token_ids == expected      # saves its prefill
    saved = saving._prefill_memo
    tokens, _, k, v, query = (x.clone() if isinstance(x, torch.Tensor) else x for x in saving.export_prefill())
    assert tokens == ids[:-1] and saved.cache.length == len(ids) - 1
    caches, build = [], saving.build_stack
    saving.build_stack = lambda *a: (lambda built: caches.append(built[0][-1].cache) or built)(build(*a))
    result = run(saving, ids, "triforce", max_new_tokens=12)
    assert result.token_ids == expected and result.stats["prefill_reused"] == len(ids) - 1
    assert len(caches) == 1 and caches[0] is saved.cache and saving._prefill_memo.cache is saved.cache
    assert saved.cache.length == len(ids) - 1 and torch.equal(saved.cache.last_query, query)
    _, _, k2, v2, query2 = saving.export_prefill()
    assert torch.equal(k2, k) and torch.equal(v2, v) and torch.equal(query2, query)
    longer = run(saving, ids, "triforce", max_new_tokens=24)
    assert caches[1] is not saved.cache and saving._prefill_memo.cache is caches[1]
    assert longer.stats["prefill_reused"] == len(ids) - 1 and longer.token_ids[:12] == expected
    other = kjv_ids[300:420]      # shares nothing with the saved prompt: the lent cache is emptied first
    result = run(saving, other, "triforce", max_new_tokens=12)
    assert caches[2] is caches[1] and result.stats["prefill_reused"] == 0
    assert result.token_ids == run(fresh, other, "triforce", max_new_tokens=12).token_ids
    assert saving._prefill_memo.tokens == tuple(other[:-1]) and caches[1].length == len(other) - 1


@pytest.mark.slow
def test_acceptance_policy_rebuild_and_never(engine, kjv_ids):
    ids = kjv_ids[:300]
    expected = run(engine, ids, "ar").token_ids
    for policy in ("never", "below:0.99"):
        assert run(engine, ids, "triforce", retrieval_rebuild=policy).token_ids == expected, policy


@pytest.mark.slow
def test_mode_figures_in_stats(engine, kjv_ids):
    result = run(engine, kjv_ids[:150], "triforce", max_new_tokens=12)
    s = result.stats
    assert set(s["levels"]) == {"drafter", "retrieval", "target"}
    for name in ("retrieval", "target"):
        level = s["levels"][name]
        assert level["accepted"] <= level["drafted"] and level["acceptance"] == round(level["accepted"] / level["drafted"], 4)
        assert level["seconds"] > 0 and level["passes"] > 0
    assert s["levels"]["target"]["passes"] == s["target_passes"] and "forced_evictions" in s["levels"]["drafter"]
    assert s["tokens_per_target_pass"] == pytest.approx(len(result.token_ids) / s["target_passes"], rel=1e-3)


@pytest.mark.slow
def test_prefill_does_not_count_as_forced_evictions(engine, kjv_ids):
    """The drafter's prefill passes (window // 2 tokens each, committed right after) overflow its
    scratch by design; forced_evictions reports the decode's only, so a prompt longer than the
    drafter's window starts at 0 (it read ~#passes before). Each verifier reports its rejections."""
    s = run(engine, kjv_ids[:700], "triforce", max_new_tokens=8).stats
    assert s["levels"]["drafter"]["forced_evictions"] == 0
    for name in ("retrieval", "target"):
        level = s["levels"][name]
        assert 0 <= level["rejections"] <= level["drafted"] - level["accepted"]


def test_drafter_with_another_vocabulary_is_refused(default_model_dir, cut_drafter, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(cut_drafter, other)
    raw = json.loads((other / "config.json").read_text())
    raw["vocab_size"] = 32000
    (other / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UserError, match="vocabulary of 32000"):
        Engine(RunConfig(model=str(default_model_dir), mode="spec", draft_model=str(other)))


def test_drafter_with_another_tokenizer_is_refused(default_model_dir, cut_drafter, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(cut_drafter, other)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]          # same size, two ids swapped
    (other / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(UserError, match="different tokenizer"):
        Engine(RunConfig(model=str(default_model_dir), mode="spec", draft_model=str(other)))


def test_custom_target_without_drafter_is_refused(cut_drafter):
    with pytest.raises(UserError, match="--draft-model"):
        Engine(RunConfig(model=str(cut_drafter), mode="triforce"))
