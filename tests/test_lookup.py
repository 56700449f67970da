"""Context lookup (runtime/lookup.py): what it copies, and that speculation with copied drafts
stays lossless (statistical test through the real draft/verify code, greedy identity on the
real model)."""
import pytest
import torch

from triforce.runtime.config import RunConfig
from triforce.runtime.lookup import MAX_TOKENS, NGRAM, TARGET_MATCH, ContextLookup
from triforce.runtime.speculate import SpecDecoder

from test_speculate import P, Q1, Q2, SAMPLES, V, ForcedLevel, chi_square_p_value, total_variation


def indexed(seq):
    lookup = ContextLookup()
    lookup.extend(seq)
    return lookup


def test_copies_what_followed_the_latest_match_up_to_the_match_length():
    seq = [9, 1, 2, 3, 4, 5, 7, 1, 2, 3, 4, 5, 8, 6, 2, 3, 4, 5]
    # the end (2, 3, 4, 5) matched latest at 8..11, preceded by 1 there and by 6 here: 4 tokens match
    assert indexed(seq).copy(seq, room=10, min_match=NGRAM) == [8, 6, 2, 3]
    assert indexed(seq).copy(seq, room=2, min_match=NGRAM) == [8, 6]          # room bounds it
    assert indexed(seq).copy(seq, room=10, min_match=5) == []                 # too short a match
    assert indexed(seq).copy(seq, room=0, min_match=NGRAM) == []


def test_a_long_repeat_copies_up_to_max_tokens():
    period = list(range(10, 30))
    seq = period * 3
    out = indexed(seq).copy(seq, room=100, min_match=TARGET_MATCH)
    assert out == (period * 2)[:MAX_TOKENS]


def test_no_match_and_the_ends_own_gram_copy_nothing():
    assert indexed([1, 2, 3, 4, 5]).copy([1, 2, 3, 4, 5], room=8, min_match=NGRAM) == []
    assert indexed([1, 2, 3]).copy([1, 2, 3], room=8, min_match=NGRAM) == []


def test_the_index_grows_with_the_sequence_and_reads_drafted_tails():
    lookup = indexed([5, 1, 2, 3, 6])
    assert lookup.copy([5, 1, 2, 3, 6, 7, 1, 2, 3], room=8, min_match=NGRAM) == [6, 7, 1]   # a drafted tail
    lookup.extend([5, 1, 2, 3, 6, 7, 1, 2, 3, 9])
    assert lookup.copy([5, 1, 2, 3, 6, 7, 1, 2, 3, 9, 4, 1, 2, 3], room=8, min_match=NGRAM) == [9, 4, 1]


def first_two_tokens(stack, gammas, prompt, samples, seed):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V, V)
    for _ in range(samples):
        decoder = SpecDecoder(stack, gammas, list(prompt), gen, lookup=ContextLookup())
        out = []
        while len(out) < 2:
            out += decoder.step(8)
        counts[out[0], out[1]] += 1
    return counts / samples


@pytest.mark.parametrize("prompt, copier", [
    ([0, 1, 2, 3] * 4, "target"),                          # a long repeat: the target takes the copy
    ([3, 3, 0, 1, 2, 3, 2, 2, 2, 0, 1, 2, 3], "retrieval"),   # a 4-token echo: only the middle level does
])
def test_copied_drafts_keep_the_target_distribution(prompt, copier):
    stack = [ForcedLevel("drafter", Q1), ForcedLevel("retrieval", Q2), ForcedLevel("target", P)]
    freqs = first_two_tokens(stack, [1, 3], prompt, SAMPLES, seed=3)
    expected = P[prompt[-1]][:, None] * P                  # p(x1 | last) p(x2 | x1)
    assert chi_square_p_value(freqs, expected, SAMPLES) > 1e-4, total_variation(freqs, expected)
    level = {lv.name: lv for lv in stack}[copier]
    assert 0 < level.stats.copied_accepted < level.stats.copied   # copies accepted and rejected (residual)
    if copier == "retrieval":
        assert stack[2].stats.copied == 0


@pytest.fixture(scope="module")
def engine(default_model_dir, cut_drafter):
    from triforce.runtime.engine import Engine
    return Engine(RunConfig(model=str(default_model_dir), mode="triforce", draft_model=str(cut_drafter)))


def test_copies_leave_greedy_output_as_ar_and_no_lookup_turns_them_off(engine):
    ids = engine.tokenizer.encode("The cat sat on the mat. The dog sat on the log. " * 6)
    base = dict(model=str(engine.model_dir), draft_model=str(engine.draft_dir), max_new_tokens=24,
                retrieval_budget=48, chunk_size=8, draft_sinks=4, draft_window=32, gamma1=2, gamma2=4)
    expected = engine.generate(ids, RunConfig(mode="ar", **base)).token_ids
    for mode in ("spec", "retrieval", "triforce"):
        on = engine.generate(ids, RunConfig(mode=mode, **base))
        assert on.token_ids == expected, mode
        assert on.stats["levels"]["target"]["copied_accepted"] > 0, mode
        off = engine.generate(ids, RunConfig(mode=mode, lookup=False, **base))
        assert off.token_ids == expected, mode
        assert all(lv["copied"] == 0 for lv in off.stats["levels"].values()), mode


def test_the_summary_line_shows_the_copies(engine):
    from triforce.runtime.cli import summary_line
    ids = engine.tokenizer.encode("The cat sat on the mat. The dog sat on the log. " * 6)
    result = engine.generate(ids, RunConfig(model=str(engine.model_dir), draft_model=str(engine.draft_dir),
                                            mode="spec", max_new_tokens=16, gamma1=2, gamma2=4))
    target = result.stats["levels"]["target"]
    assert target["copied"] > 0
    assert f"target took copies {target['copied_accepted']}/{target['copied']}" in summary_line(result)
