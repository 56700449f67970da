"""The speculation stack (speculate.py) is lossless: statistical tests through the real draft /
verify code with levels whose distributions are forced (a first-order Markov world, so a level's
distribution depends on the sequence), and greedy identity through the same code."""
import pytest
import torch

import triforce.runtime.speculate as speculate
from triforce.runtime.sampling import residual, sample
from triforce.runtime.speculate import LevelStats, SpecDecoder

V = 4


class ForcedLevel:
    """A level whose next-token distribution is a fixed function of the previous token."""

    def __init__(self, name: str, table: torch.Tensor):
        self.name, self.table, self.stats = name, table, LevelStats()

    def probs(self, seq: list[int], k: int) -> torch.Tensor:
        return self.table[torch.tensor(seq[-k:])]                 # [k, V]

    def commit(self, committed):
        pass


def markov(rows) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float64)
    return (t / t.sum(-1, keepdim=True)).float()


P = markov([[5, 3, 1, 1], [1, 4, 4, 1], [2, 2, 2, 4], [6, 1, 1, 2]])      # target
Q2 = markov([[3, 3, 3, 1], [2, 3, 3, 2], [1, 1, 3, 5], [5, 3, 1, 1]])     # middle level
Q1 = markov([[17, 1, 1, 1], [1, 17, 1, 1], [1, 1, 17, 1], [1, 1, 1, 17]])  # a sticky drafter


def first_two_tokens(stack, gammas, samples, seed):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V, V)
    for _ in range(samples):
        decoder = SpecDecoder(stack, gammas, [0], gen)
        out = []
        while len(out) < 2:   # a whole round (up to gamma + 1 tokens); only the first two are looked at
            out += decoder.step(8)
        counts[out[0], out[1]] += 1
    return counts / samples


def expected_pairs(table):
    return table[0][:, None] * table                            # p(x1 | 0) p(x2 | x1)  [V, V]


def total_variation(a, b):
    return 0.5 * (a - b).abs().sum().item()


def chi_square_p_value(freqs, expected, samples):
    """P(chi-square >= observed) for the 16-cell histogram (15 degrees of freedom)."""
    stat = (samples * (freqs - expected) ** 2 / expected).sum()
    dof = torch.tensor(expected.numel() - 1.0)
    return torch.special.gammaincc(dof / 2, stat / 2).item()


SAMPLES = 4000  # every cell then expects at least 40 counts


@pytest.mark.parametrize("gammas", [[1, 3], [2, 2]])
def test_three_level_stack_emits_the_target_distribution(gammas):
    stack = [ForcedLevel("drafter", Q1), ForcedLevel("retrieval", Q2), ForcedLevel("target", P)]
    freqs = first_two_tokens(stack, gammas, SAMPLES, seed=1)
    assert chi_square_p_value(freqs, expected_pairs(P), SAMPLES) > 1e-4, total_variation(freqs, expected_pairs(P))
    assert 0 < stack[1].stats.accepted < stack[1].stats.drafted    # both levels really speculated
    assert 0 < stack[2].stats.accepted < stack[2].stats.drafted


def test_two_level_stack_emits_the_target_distribution():
    stack = [ForcedLevel("drafter", Q2), ForcedLevel("target", P)]
    freqs = first_two_tokens(stack, [3], SAMPLES, seed=2)
    assert chi_square_p_value(freqs, expected_pairs(P), SAMPLES) > 1e-4, total_variation(freqs, expected_pairs(P))


def reference_middle_level_accept(draft_tokens, draft_probs, target_probs, generator):
    """The reference's defect: on rejection the middle level samples from its own distribution
    (p_retrieval) instead of the residual norm(max(0, p - q))."""
    K = draft_tokens.shape[1]
    p_x = target_probs[0, :K].gather(-1, draft_tokens[0, :, None]).squeeze(-1)
    q_x = draft_probs[0].gather(-1, draft_tokens[0, :, None]).squeeze(-1)
    for i in range(K):
        if torch.rand(1, generator=generator).item() * q_x[i] >= p_x[i]:
            return torch.tensor([i]), sample(target_probs[:, i], generator)
    return torch.tensor([K]), sample(target_probs[:, K], generator)


def test_the_reference_middle_level_rule_fails_this_test(monkeypatch):
    real_accept = speculate.accept

    def accept(draft_tokens, draft_probs, target_probs, generator):
        middle_is_verifying = any(torch.equal(target_probs[0, 0], row) for row in Q2)
        if middle_is_verifying:
            return reference_middle_level_accept(draft_tokens, draft_probs, target_probs, generator)
        return real_accept(draft_tokens, draft_probs, target_probs, generator)

    monkeypatch.setattr(speculate, "accept", accept)
    stack = [ForcedLevel("drafter", Q1), ForcedLevel("retrieval", Q2), ForcedLevel("target", P)]
    freqs = first_two_tokens(stack, [1, 3], SAMPLES, seed=1)
    # the same check as above, failed beyond any doubt
    assert chi_square_p_value(freqs, expected_pairs(P), SAMPLES) < 1e-12, total_variation(freqs, expected_pairs(P))


def test_greedy_stack_is_the_target_argmax():
    one_hot = lambda t: torch.nn.functional.one_hot(t.argmax(-1), V).float()
    stack = [ForcedLevel("drafter", one_hot(Q1)), ForcedLevel("retrieval", one_hot(Q2)),
             ForcedLevel("target", one_hot(P))]
    decoder = SpecDecoder(stack, [2, 4], [0], torch.Generator().manual_seed(0))
    out = []
    while len(out) < 20:
        out += decoder.step(20 - len(out))
    expected, prev = [], 0
    for _ in range(20):
        prev = int(P[prev].argmax())
        expected.append(prev)
    assert out == expected


def test_residual_sanity_for_the_tables():
    # the middle level's rejections matter: q1 and q2 differ enough that the residual is not q2
    assert total_variation(residual(Q2[0], Q1[0]), Q2[0]) > 0.1
