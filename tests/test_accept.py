"""accept(): forced tables, exact greedy behaviour, and statistical tests of losslessness.

The statistical tests live in a unigram world: every level's distribution is the same at every
position (p for the target, q2 for the middle level, q1 for the drafter), so each emitted token
must follow the verifier's distribution on its own and a chi-square test over a few tokens
checks it. Seeds are fixed; the thresholds leave margins of many standard errors.
"""
import pytest
import torch

from triforce.runtime.accept import accept, accept_greedy, emitted_tokens
from triforce.runtime.sampling import SamplingParams, probs_from_logits, sample

GREEDY = SamplingParams()
N = 100_000  # samples per statistical check: standard error of a frequency <= 0.0016

# Distributions for the hierarchy: a drafter that is confidently wrong (acceptance into the
# middle level sum(min(q1, q2)) = 0.35, the paper's figure), a middle level close to the
# target (acceptance sum(min(q2, p)) = 0.9).
Q1 = torch.tensor([0.85, 0.05, 0.05, 0.05])
Q2 = torch.tensor([0.20, 0.30, 0.30, 0.20])
P = torch.tensor([0.25, 0.35, 0.25, 0.15])


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    """[N, 4] tensors are too small to share between threads (conftest.one_thread)."""


def one_hot(tokens: list, v: int) -> torch.Tensor:
    return torch.nn.functional.one_hot(torch.tensor(tokens), v).float()


def fit(tokens: torch.Tensor, probs: torch.Tensor) -> tuple[float, float]:
    """Pearson chi-square p-value and total-variation distance of tokens [N] against probs [V]."""
    n, v = tokens.numel(), probs.numel()
    counts = torch.bincount(tokens, minlength=v).double()
    expected = n * probs.double()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    p_value = torch.special.gammaincc(torch.tensor((v - 1) / 2.0, dtype=torch.double), chi2 / 2)
    tv = 0.5 * (counts / n - probs.double()).abs().sum()
    return p_value.item(), tv.item()


def assert_follows(tokens: torch.Tensor, probs: torch.Tensor):
    p_value, tv = fit(tokens, probs)
    # With a fixed seed the outcome is deterministic; for a fresh seed a true distribution fails
    # p > 1e-6 once in a million runs, and a TV of 0.01 is over 6 standard errors here.
    assert p_value > 1e-6 and tv < 0.01, f"p-value {p_value:.3g}, TV {tv:.4f}"


def assert_differs(tokens: torch.Tensor, probs: torch.Tensor):
    p_value, tv = fit(tokens, probs)
    assert p_value < 1e-30 and tv > 0.05, f"p-value {p_value:.3g}, TV {tv:.4f}"


# --- forced tables ------------------------------------------------------------------------

def test_identical_p_and_q_accept_everything_and_bonus_comes_from_p_K():
    B, K, V = 8, 3, 5
    q = torch.softmax(torch.randn(B, K, V, generator=torch.Generator().manual_seed(0)), -1)
    drafted = sample(q, torch.Generator().manual_seed(1))                  # [B, K]
    bonus = one_hot([4] * B, V).unsqueeze(1)                               # [B, 1, V]
    n, nxt = accept(drafted, q, torch.cat([q, bonus], 1), torch.Generator().manual_seed(2))
    assert n.tolist() == [K] * B
    assert nxt.tolist() == [4] * B
    assert emitted_tokens(drafted, n, nxt).tolist() == torch.cat([drafted, nxt[:, None]], 1).tolist()


def test_draft_where_target_has_no_mass_is_always_rejected():
    B, V = 50_000, 4
    p = torch.tensor([0.5, 0.5, 0.0, 0.0])
    q = torch.tensor([0.0, 0.0, 0.5, 0.5])
    gen = torch.Generator().manual_seed(3)
    drafted = sample(q.expand(B, 2, V), gen)                               # tokens 2 or 3
    n, nxt = accept(drafted, q.expand(B, 2, V), p.expand(B, 3, V), gen)
    assert (n == 0).all()
    # The recovered token comes from residual(p, q) = p: tokens 0 and 1, evenly.
    assert set(nxt.unique().tolist()) == {0, 1}
    assert abs((nxt == 0).float().mean().item() - 0.5) < 0.01


def test_rejection_position_is_per_row():
    # One-hot tables make every test deterministic: row r agrees with the target on r tokens.
    V = 4
    target = one_hot([0, 1, 2, 3], V)                                      # [K+1, V], K = 3
    draft_tokens = torch.tensor([[3, 3, 3], [0, 3, 3], [0, 1, 3], [0, 1, 2]])
    draft_probs = torch.nn.functional.one_hot(draft_tokens, V).float()
    n, nxt = accept(draft_tokens, draft_probs, target.expand(4, 4, V), torch.Generator())
    assert n.tolist() == [0, 1, 2, 3]
    assert nxt.tolist() == [0, 1, 2, 3]                                    # recovered, ..., bonus
    assert emitted_tokens(draft_tokens, n, nxt).tolist() == [
        [0, -1, -1, -1], [0, 1, -1, -1], [0, 1, 2, -1], [0, 1, 2, 3]]


def test_a_later_pass_does_not_rescue_an_earlier_rejection():
    V = 3
    draft_tokens = torch.tensor([[1, 2]])
    draft_probs = one_hot([1, 2], V)[None]
    target = one_hot([0, 2, 2], V)[None]                                   # position 1 would pass
    n, nxt = accept(draft_tokens, draft_probs, target, torch.Generator())
    assert n.tolist() == [0] and nxt.tolist() == [0]


def test_no_draft_samples_from_the_verifier():
    n, nxt = accept(torch.empty(2, 0, dtype=torch.long), torch.empty(2, 0, 3),
                    one_hot([[2], [1]], 3), torch.Generator())
    assert n.tolist() == [0, 0] and nxt.tolist() == [2, 1]


def test_greedy_levels_give_exact_argmax_decoding():
    # Random logits per position; greedy drafter and verifier. Expected: accept while the
    # argmaxes agree, then emit the verifier's argmax, exactly.
    B, K, V = 512, 5, 8
    g = torch.Generator().manual_seed(4)
    target_logits = torch.randn(B, K + 1, V, generator=g)
    # A drafter that agrees with the target's argmax at most positions.
    draft_logits = target_logits[:, :K] + 0.8 * torch.randn(B, K, V, generator=g)
    q = probs_from_logits(draft_logits, GREEDY)
    p = probs_from_logits(target_logits, GREEDY)
    drafted = sample(q, g)
    assert torch.equal(drafted, draft_logits.argmax(-1))
    n, nxt = accept(drafted, q, p, g)

    agree = drafted == target_logits[:, :K].argmax(-1)                     # [B, K]
    expected_n = agree.long().cumprod(-1).sum(-1)
    assert torch.equal(n, expected_n)
    assert torch.equal(nxt, target_logits.argmax(-1)[torch.arange(B), expected_n])
    assert 0 < (n == K).sum() < B and (n == 0).any()                       # all cases exercised


def test_accept_greedy_is_accept_on_one_hot_distributions():
    """accept_greedy (what verify_round runs at T = 0, reading argmaxes only) gives accept()'s
    counts and tokens on the one-hot rows probs_from_logits makes at T = 0, copies included (a
    draft that is not the proposer's argmax but one-hot by definition), ties and NaN rows too."""
    from triforce.runtime.sampling import greedy_tokens
    B, K, V = 400, 5, 8
    g = torch.Generator().manual_seed(5)
    target_logits = torch.randint(0, 4, (B, K + 1, V), generator=g).float()   # many ties: first index wins
    target_logits[7, 2, 3] = float("nan")                                      # a NaN wins its row
    drafted = torch.where(torch.rand(B, K, generator=g) < 0.7, target_logits[:, :K].argmax(-1),
                          torch.randint(0, V, (B, K), generator=g))
    q = torch.nn.functional.one_hot(drafted, V).float()                         # a greedy proposer's or a copy's
    p = probs_from_logits(target_logits, GREEDY)
    n, nxt = accept(drafted, q, p, g)
    for b in range(B):
        best = greedy_tokens(target_logits[b])
        assert best == target_logits[b].argmax(-1).tolist()
        assert accept_greedy(drafted[b].tolist(), best) == (int(n[b]), int(nxt[b])), b
    assert 0 < (n == K).sum() < B and (n == 0).any()


def test_accept_is_reproducible_for_a_seed():
    B, K, V = 1000, 4, 6
    q = torch.softmax(torch.randn(B, K, V, generator=torch.Generator().manual_seed(5)), -1)
    p = torch.softmax(torch.randn(B, K + 1, V, generator=torch.Generator().manual_seed(6)), -1)
    drafted = sample(q, torch.Generator().manual_seed(7))
    a = accept(drafted, q, p, torch.Generator().manual_seed(8))
    b = accept(drafted, q, p, torch.Generator().manual_seed(8))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_native_accept_gives_the_torch_ops_tokens(monkeypatch):
    """On the CPU, fp32 rounds go through csrc/sampling_cpu.cpp accept_rows: for the same generator
    state it returns what the torch ops return (rejections, all-accepted bonus rows, drafted tokens
    of q == 0 or p == 0, p == q rows, expanded inputs, a 49,152-wide vocabulary)."""
    from triforce.runtime import accept as accept_mod
    if accept_mod._native_accept(Q1[None, None], P[None, None]) is None:
        pytest.skip("native sampling kernel not built")
    g = torch.Generator().manual_seed(11)
    cases = []
    for B, K, V in ((500, 1, 4), (300, 4, 7), (64, 3, 300), (3, 5, 49152)):
        q = torch.softmax(torch.randn(B, K, V, generator=g) * 2, -1)
        p = torch.softmax(torch.randn(B, K + 1, V, generator=g) * 2, -1)
        q[: B // 4, :, : V // 2] = 0                                       # zero draft mass
        p[B // 4: B // 2, :K] = q[B // 4: B // 2]                          # p == q: always accepted
        drafted = sample(q, g)
        drafted[: B // 8, 0] = 0                                           # q == 0 at a drafted token
        cases.append((drafted, q, p))
    drafted = sample(Q1.expand(200, 2, 4), g)
    cases.append((drafted, Q1.expand(200, 2, 4), P.expand(200, 3, 4)))   # stride-0 rows
    for i, (drafted, q, p) in enumerate(cases):
        native = accept(drafted, q, p, torch.Generator().manual_seed(i))
        with monkeypatch.context() as m:
            m.setattr(accept_mod, "_native_accept", lambda q, p: None)
            ref = accept(drafted, q, p, torch.Generator().manual_seed(i))
        assert torch.equal(native[0], ref[0]) and torch.equal(native[1], ref[1]), i
        assert 0 < int((native[0] == drafted.shape[1]).sum()) < len(drafted), i   # bonus rows and rejections
    with pytest.raises(RuntimeError, match="outside the vocabulary"):
        accept(torch.tensor([[9]]), Q1[None, None], P.expand(1, 2, 4), torch.Generator())


# --- statistics: two levels ---------------------------------------------------------------

def unigram_draft(q: torch.Tensor, gamma: int, n: int, gen: torch.Generator):
    """A drafter that proposes gamma tokens from q at every position: tokens [n, gamma], probs."""
    tokens = torch.multinomial(q, n * gamma, replacement=True, generator=gen).view(n, gamma)
    return tokens, q.expand(n, gamma, q.numel())


def first_tokens(stream: torch.Tensor, count: int) -> torch.Tensor:
    """The first `count` real tokens of each row of a padded stream [n, S] (pad = -1)."""
    real_first = torch.sort((stream < 0).int(), dim=-1, stable=True).indices
    return stream.gather(-1, real_first)[:, :count]


def test_two_levels_first_token_follows_the_target():
    gamma, gen = 3, torch.Generator().manual_seed(10)
    drafted, q = unigram_draft(Q2, gamma, N, gen)
    n, nxt = accept(drafted, q, P.expand(N, gamma + 1, 4), gen)
    first = emitted_tokens(drafted, n, nxt)[:, 0]
    assert_follows(first, P)
    # The first draft is accepted with probability sum(min(p, q)) = 0.9.
    assert abs((n > 0).float().mean().item() - 0.9) < 0.01


# --- statistics: the TriForce hierarchy ---------------------------------------------------

def accept_with_reference_defect(draft_tokens, draft_probs, target_probs, generator):
    """The reference implementation's middle-level rule, kept here to show that it is wrong:
    after a rejection it samples the token from the verifier's p (p_retrieval) itself instead
    of from the residual norm(max(0, p - q))."""
    num_accepted, _ = accept(draft_tokens, draft_probs, target_probs, generator)
    p_next = target_probs[torch.arange(len(num_accepted)), num_accepted]
    return num_accepted, sample(p_next, generator)


def middle_level_draft(gamma1: int, gamma2: int, gen: torch.Generator, middle_accept):
    """gamma2 tokens drafted by the middle level: rounds in which it verifies the drafter's
    gamma1 tokens against q2. Every round emits at least one token, so gamma2 rounds suffice;
    the extra tokens are dropped, as the runtime does when it stops at gamma2."""
    rounds = []
    for _ in range(gamma2):
        drafted, q1 = unigram_draft(Q1, gamma1, N, gen)
        n, nxt = middle_accept(drafted, q1, Q2.expand(N, gamma1 + 1, 4), gen)
        rounds.append(emitted_tokens(drafted, n, nxt))
    return first_tokens(torch.cat(rounds, -1), gamma2)                     # [N, gamma2]


def triforce_first_two_tokens(gamma1, gamma2, seed, middle_accept=accept):
    """First two tokens of the final output, and the first middle-level draft, per row."""
    gen = torch.Generator().manual_seed(seed)
    rounds, middle_drafts = [], []
    for _ in range(2):  # each target round emits at least one token: two give at least two
        drafted = middle_level_draft(gamma1, gamma2, gen, middle_accept)
        middle_drafts.append(drafted)
        # The target verifies with the middle level's stated distribution q2.
        n, nxt = accept(drafted, Q2.expand(N, gamma2, 4), P.expand(N, gamma2 + 1, 4), gen)
        rounds.append(emitted_tokens(drafted, n, nxt))
    return first_tokens(torch.cat(rounds, -1), 2), middle_drafts[0]


@pytest.mark.parametrize("gamma1, gamma2", [(1, 4), (2, 3)])
def test_triforce_hierarchy_output_follows_the_target(gamma1, gamma2):
    out, middle = triforce_first_two_tokens(gamma1, gamma2, seed=20 + gamma1)
    assert_follows(middle[:, 0], Q2)   # the middle level's drafts are q2-distributed...
    assert_follows(middle[:, 1], Q2)
    assert_follows(out[:, 0], P)       # ...so the target's acceptance restores p exactly
    assert_follows(out[:, 1], P)


def test_reference_middle_level_rule_breaks_the_output_distribution():
    # gamma1 = 1 as in the reference. Its middle level emits min(q1, q2) + (1 - 0.35) q2,
    # TV 0.13 from q2; the target then accepts against q2 and cannot repair it.
    out, middle = triforce_first_two_tokens(1, 4, seed=30, middle_accept=accept_with_reference_defect)
    assert_differs(middle[:, 0], Q2)
    assert_differs(out[:, 0], P)
    assert_differs(out[:, 1], P)
