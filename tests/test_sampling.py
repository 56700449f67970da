"""probs_from_logits, sample, residual and SamplingParams on forced logits tables."""
import math

import pytest
import torch

from triforce.runtime.errors import UserError
from triforce.runtime.sampling import SamplingParams, probs_from_logits, residual, sample

GREEDY = SamplingParams()
INF = float("inf")


def assert_close(actual: torch.Tensor, expected: torch.Tensor):
    # Not torch.testing.assert_close: its first call imports torch.distributed (over 1 s).
    assert torch.allclose(actual, expected, rtol=1e-5, atol=1e-6), f"{actual} != {expected}"


def support(probs: torch.Tensor) -> set[int]:
    return set(torch.nonzero(probs > 0).flatten().tolist())


# --- greedy -------------------------------------------------------------------------------

def test_greedy_is_exact_one_hot_argmax():
    logits = torch.randn(64, 1000, generator=torch.Generator().manual_seed(0))
    probs = probs_from_logits(logits, GREEDY)
    assert probs.dtype == torch.float32
    assert torch.equal(probs.argmax(-1), logits.argmax(-1))
    assert torch.equal(probs.sum(-1), torch.ones(64))
    assert torch.equal(probs.amax(-1), torch.ones(64))


def test_greedy_survives_inf_and_huge_logits():
    logits = torch.tensor([
        [-INF, -INF, 3.0, -INF],
        [1e38, -1e38, 3e38, -INF],
        [-3e38, -INF, -1e38, -3e38],
        [-INF, INF, 0.0, 1e38],
    ])
    probs = probs_from_logits(logits, GREEDY)
    assert not probs.isnan().any()
    assert probs.argmax(-1).tolist() == [2, 2, 2, 1]
    assert torch.equal(probs.sum(-1), torch.ones(4))


def test_greedy_ties_go_to_lowest_index_like_argmax():
    logits = torch.tensor([[1.0, 5.0, 5.0, 2.0], [7.0, 7.0, 7.0, 7.0]])
    assert probs_from_logits(logits, GREEDY).argmax(-1).tolist() == [1, 0]
    assert support(probs_from_logits(logits, GREEDY)[0]) == {1}


def test_greedy_accepts_half_precision_and_batch_dims():
    logits = torch.randn(2, 3, 50, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    probs = probs_from_logits(logits, GREEDY)
    assert probs.shape == (2, 3, 50) and probs.dtype == torch.float32
    assert torch.equal(probs.argmax(-1), logits.float().argmax(-1))


# --- temperature, top-k, top-p ------------------------------------------------------------

def test_temperature_softmax_matches_definition():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.5]])
    probs = probs_from_logits(logits, SamplingParams(temperature=0.7))
    assert_close(probs, torch.softmax(logits / 0.7, -1))


def test_small_temperature_with_huge_logits_has_no_nan():
    # Dividing first would overflow float32 to inf and give inf - inf = NaN in softmax.
    logits = torch.tensor([[3e38, -3e38, 0.0, -INF]])
    probs = probs_from_logits(logits, SamplingParams(temperature=0.01))
    assert not probs.isnan().any()
    assert probs.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_top_k_keeps_the_k_largest():
    logits = torch.tensor([[1.0, 4.0, 3.0, 2.0, -INF]])
    probs = probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=2))
    assert support(probs[0]) == {1, 2}
    assert_close(probs[0, [1, 2]], torch.softmax(torch.tensor([4.0, 3.0]), -1))
    # k = 1 is greedy-like; k >= V is off.
    assert support(probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=1))[0]) == {1}
    off = probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=99))
    assert_close(off, torch.softmax(logits, -1))


def test_top_k_keeps_ties_at_the_cut():
    logits = torch.tensor([[5.0, 3.0, 3.0, 1.0]])
    assert support(probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=2))[0]) == {0, 1, 2}


# (0.5, 0.3, 0.15, 0.05) in a shuffled order: cumulative 0.5, 0.8, 0.95, 1.0 by rank.
NUCLEUS = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()


@pytest.mark.parametrize("top_p, kept", [
    (1e-6, {1}),          # the top token is always kept
    (0.3, {1}),
    (0.6, {1, 3}),
    (0.79, {1, 3}),
    (0.81, {1, 3, 0}),
    (0.96, {1, 3, 0, 2}),
    (1.0, {1, 3, 0, 2}),
])
def test_top_p_keeps_smallest_set_reaching_the_mass(top_p, kept):
    probs = probs_from_logits(NUCLEUS, SamplingParams(temperature=1.0, top_p=top_p))
    assert support(probs[0]) == kept
    full = torch.softmax(NUCLEUS[0], -1)
    idx = sorted(kept)
    assert_close(probs[0, idx], full[idx] / full[idx].sum())


def test_top_k_is_applied_before_top_p():
    # After top-k=2 the distribution is (0.625, 0.375) on tokens 1, 3; top-p 0.6 keeps only 1.
    probs = probs_from_logits(NUCLEUS, SamplingParams(temperature=1.0, top_k=2, top_p=0.6))
    assert support(probs[0]) == {1}


def test_filters_are_per_row():
    logits = torch.stack([NUCLEUS[0], NUCLEUS[0].flip(-1)])
    probs = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.6))
    assert support(probs[0]) == {1, 3} and support(probs[1]) == {2, 0}


# --- sample -------------------------------------------------------------------------------

def test_sample_is_reproducible_for_a_seed():
    probs = torch.softmax(torch.randn(1000, 10, generator=torch.Generator().manual_seed(2)), -1)
    a = sample(probs, torch.Generator().manual_seed(7))
    b = sample(probs, torch.Generator().manual_seed(7))
    c = sample(probs, torch.Generator().manual_seed(8))
    assert a.shape == (1000,) and a.dtype == torch.int64
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_sample_on_one_hot_rows_returns_the_argmax():
    n, v = 200_000, 6
    hot = torch.randint(v, (n,), generator=torch.Generator().manual_seed(3))
    probs = torch.nn.functional.one_hot(hot, v).float()
    assert torch.equal(sample(probs, torch.Generator().manual_seed(4)), hot)


def test_sample_follows_the_distribution_and_never_draws_zero_mass():
    n = 200_000
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    tokens = sample(p.expand(n, 4), torch.Generator().manual_seed(5))
    freq = torch.bincount(tokens, minlength=4) / n
    assert freq[1] == 0
    # Standard error <= 0.0011 per category; 0.006 is over 5 of them.
    assert (freq - p).abs().max() < 0.006


# --- residual -----------------------------------------------------------------------------

def test_residual_is_normalized_positive_part():
    p = torch.tensor([0.5, 0.3, 0.2, 0.0])
    q = torch.tensor([0.2, 0.5, 0.1, 0.2])
    assert_close(residual(p, q), torch.tensor([0.75, 0.0, 0.25, 0.0]))


def test_residual_of_identical_distributions_is_p_not_nan():
    p = torch.tensor([[0.25, 0.25, 0.5], [0.0, 1.0, 0.0]])
    out = residual(p, p.clone())
    assert not out.isnan().any()
    assert torch.equal(out, p)


def test_residual_of_one_hots_is_the_verifier_argmax():
    p = torch.tensor([0.0, 0.0, 1.0])
    q = torch.tensor([1.0, 0.0, 0.0])
    assert torch.equal(residual(p, q), p)


# --- SamplingParams -----------------------------------------------------------------------

def test_params_greedy_property_and_defaults():
    assert SamplingParams().greedy and SamplingParams().validate() == SamplingParams()
    assert not SamplingParams(temperature=0.6, top_p=0.9).validate().greedy


@pytest.mark.parametrize("kwargs, needle", [
    ({"temperature": -0.5}, r"temperature -0\.5 .*>= 0"),
    ({"temperature": math.nan}, r"temperature nan .*finite"),
    ({"temperature": math.inf}, r"temperature inf .*finite"),
    ({"top_p": 0.0}, r"top_p 0\.0 .*\(0, 1\]"),
    ({"top_p": 1.5}, r"top_p 1\.5 .*\(0, 1\]"),
    ({"top_p": math.nan}, r"top_p nan .*\(0, 1\]"),
    ({"top_k": -1}, r"top_k -1 .*>= 0"),
    ({"top_k": 2.5}, r"top_k 2\.5 .*integer"),
])
def test_params_validate_names_the_bad_value_and_range(kwargs, needle):
    with pytest.raises(UserError, match=needle):
        SamplingParams(**kwargs).validate()


@pytest.mark.parametrize("V", [10, 700, 49152])
def test_nucleus_from_the_top_candidates_equals_the_full_sort(V):
    """The fast nucleus (topk of NUCLEUS_CANDIDATES) keeps exactly the tokens the stable full sort
    keeps, ties at the cut included (lowest ids first); a nucleus wider than the candidates (a
    flat row) takes the full sort."""
    from triforce.runtime import sampling
    g = torch.Generator().manual_seed(V)
    for trial in range(20):
        x = torch.randn(3, V, generator=g) * (0.3 + 3 * trial / 20)
        if trial % 3 == 0:
            x = torch.round(x * 2) / 2                   # many exact ties, some at the cut
        probs = torch.softmax(x, -1)
        for top_p in (0.05, 0.5, 0.9, 0.999):
            fast = sampling._nucleus_among_top(probs, top_p)
            if fast is not None:
                assert torch.equal(fast, sampling._nucleus_by_sort(probs, top_p)), (trial, top_p)
    flat = torch.full((1, V), 1.0 / V)
    wide = V > sampling.NUCLEUS_CANDIDATES
    assert (sampling._nucleus_among_top(flat, 0.9) is None) == wide
    kept = probs_from_logits(torch.zeros(1, V), SamplingParams(temperature=1.0, top_p=0.9)) > 0
    assert kept.sum() == sampling._nucleus_by_sort(flat, 0.9).sum()


@pytest.mark.parametrize("V", [10, 700, 49152])
def test_native_probs_equal_the_torch_definition(V):
    """csrc/sampling_cpu.cpp (used on the CPU when top_k is off) keeps the same tokens as the torch
    definition and gives the same probabilities: greedy bitwise, ties (lowest index first) and
    -inf logits (a pruned head: exactly 0) included."""
    from triforce.runtime import native, sampling
    kernel = native.sampling_cpu()
    if kernel is None:
        pytest.skip("native sampling kernel not built")
    g = torch.Generator().manual_seed(V)
    for trial in range(8):
        x = torch.randn(3, V, generator=g) * (0.3 + 3 * trial / 8)
        if trial % 3 == 0:
            x = torch.round(x * 2) / 2                   # many exact ties, some at the cut
        if trial % 4 == 1:
            x[:, ::3] = float("-inf")                     # pruned tokens
        for t, top_p in ((0.0, 1.0), (0.6, 1.0), (0.6, 0.9), (1.0, 0.5), (0.05, 0.95), (1.3, 0.999),
                         (0.8, 1 - 1e-12)):   # the last: the kernel's walk over every entry
            params = SamplingParams(temperature=t, top_p=top_p)
            ours = kernel.probs_rows(x, t, top_p)
            ref = sampling.probs_from_logits_reference(x, params)
            if t == 0:
                assert torch.equal(ours, ref), (trial, t)
                continue
            differ = (ours > 0) != (ref > 0)
            if differ.any():
                # the mass before each token is summed in fp64 here and by torch's fp32 cumsum there:
                # the cut may move only among tokens whose mass before is within that rounding of top_p
                full = torch.softmax(x.double() / t, -1)
                ordered, order = full.sort(dim=-1, descending=True, stable=True)
                before = torch.empty_like(full).scatter_(-1, order, ordered.cumsum(-1) - ordered)
                assert ((before[differ] - top_p).abs() < 2e-3).all(), (trial, t, top_p)
                rows = ~differ.any(dim=-1)
                assert_close(ours[rows], ref[rows])
                continue
            assert_close(ours, ref)
    nan = torch.zeros(1, V)
    nan[0, V // 2] = float("nan")
    nan[0, 1] = 5.0
    assert int(kernel.probs_rows(nan, 0.0, 1.0).argmax()) == int(nan.argmax()) == V // 2


@pytest.mark.parametrize("V", [10, 700, 49152])
def test_native_top_probability_equals_the_softmax_maximum(V):
    """csrc/sampling_cpu.cpp's top_probability_rows (a greedy level's confidence, one read of the row)
    equals its torch twin, the softmax's largest entry, for spread and peaked rows, ties, -inf
    logits (a pruned head) and a row whose only finite logit is certain."""
    from triforce.runtime import native, sampling
    kernel = native.sampling_cpu()
    if kernel is None:
        pytest.skip("native sampling kernel not built")
    g = torch.Generator().manual_seed(V)
    for trial in range(8):
        x = torch.randn(4, V, generator=g) * (0.3 + 4 * trial)
        if trial % 3 == 0:
            x = torch.round(x * 2) / 2
        if trial % 4 == 1:
            x[:, ::3] = float("-inf")
        assert_close(kernel.top_probability_rows(x), sampling.top_probability_reference(x))
    one = torch.full((1, V), float("-inf"))
    one[0, V - 1] = 3.0
    assert_close(sampling.top_probability(one), torch.ones(1))
    assert sampling.top_probability(torch.zeros(2, 5, V)).shape == (2, 5)


def test_native_inverse_cdf_draws_the_torch_paths_tokens(monkeypatch):
    """sample() and sample_excess() give the same token natively as through torch's cumsum and
    searchsorted, for the same generator state: same fp32 weights, same sequential fp64 sums."""
    from triforce.runtime import native, sampling
    if native.sampling_cpu() is None:
        pytest.skip("native sampling kernel not built")
    g = torch.Generator().manual_seed(3)
    V = 49152
    p = torch.softmax(torch.randn(6, V, generator=g) * 3, -1)
    q = torch.softmax(torch.randn(6, V, generator=g) * 3, -1)
    q[1] = p[1]                                   # no excess mass: p itself
    q[2] = 0                                      # a bonus row: p itself
    p[3] = 0
    p[3, 777] = 1                                 # one-hot
    draws = {}
    for name in ("native", "torch"):
        if name == "torch":
            monkeypatch.setattr(sampling, "_native_sampling", lambda flat: None)
        gen = torch.Generator().manual_seed(11)
        draws[name] = [sampling.sample_excess(p, q, gen) for _ in range(20)] + [sampling.sample(p, gen) for _ in range(20)]
    assert all(torch.equal(a, b) for a, b in zip(draws["native"], draws["torch"]))
    assert all(int(d[3]) == 777 for d in draws["native"])
