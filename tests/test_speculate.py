"""The speculation stack (speculate.py) is lossless: statistical tests through the real draft /
verify code with levels whose distributions are forced (a first-order Markov world, so a level's
distribution depends on the sequence), and greedy identity through the same code."""
import pytest
import torch

import triforce.runtime.speculate as speculate
from triforce.runtime.sampling import SamplingParams, residual, sample
from triforce.runtime.speculate import Extension, LevelStats, SpecDecoder

V = 4


class ForcedLevel:
    """A level whose next-token distribution is a fixed function of the previous token."""

    def __init__(self, name: str, table: torch.Tensor, temperature: float = 1.0):
        self.name, self.table, self.stats = name, table, LevelStats()
        self.params = SamplingParams(temperature=temperature)     # T = 0: verify_round reads greedy_tokens

    def probs(self, seq: list[int], k: int) -> torch.Tensor:
        self.last = self.table[torch.tensor(seq[-k:])]            # [k, V]
        return self.last

    def greedy_tokens(self, seq: list[int], k: int) -> list[int]:  # as Level.greedy_tokens: probs' argmaxes
        return self.probs(seq, k).argmax(-1).tolist()

    def confidences(self, n: int) -> list[float]:                 # as Level.confidences (sampled rows)
        return self.last[:n].amax(-1).tolist()

    def commit(self, committed):
        pass


def markov(rows) -> torch.Tensor:
    t = torch.tensor(rows, dtype=torch.float64)
    return (t / t.sum(-1, keepdim=True)).float()


P = markov([[5, 3, 1, 1], [1, 4, 4, 1], [2, 2, 2, 4], [6, 1, 1, 2]])      # target
Q2 = markov([[3, 3, 3, 1], [2, 3, 3, 2], [1, 1, 3, 5], [5, 3, 1, 1]])     # middle level
Q1 = markov([[17, 1, 1, 1], [1, 17, 1, 1], [1, 1, 17, 1], [1, 1, 1, 17]])  # a sticky drafter


def first_two_tokens(stack, gammas, samples, seed, extend=None):
    gen = torch.Generator().manual_seed(seed)
    counts = torch.zeros(V, V)
    for _ in range(samples):
        decoder = SpecDecoder(stack, gammas, [0], gen, extend=extend)
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


# A middle level sure (top probability >= SURE) after tokens 0, 2 and 3 and not after 1: past γ,
# its drafts go on unless the last one drew a 1, so when a draft stops depends on what it drew,
# the case a stopping rule could bias
Q2_SURE = markov([[4, 3, 2, 1], [2, 3, 3, 2], [1, 1, 3, 5], [5, 3, 1, 1]])
SURE = 0.35


@pytest.mark.parametrize("stack_of", ["three", "two"])
def test_drafts_extended_while_sure_still_emit_the_target_distribution(stack_of):
    middle = ForcedLevel("retrieval", Q2_SURE)
    stack = ([ForcedLevel("drafter", Q1), middle] if stack_of == "three" else [middle]) + [ForcedLevel("target", P)]
    gammas = [1, 1] if stack_of == "three" else [1]
    freqs = first_two_tokens(stack, gammas, SAMPLES, seed=3, extend=Extension(SURE, cap=5))
    assert chi_square_p_value(freqs, expected_pairs(P), SAMPLES) > 1e-4, total_variation(freqs, expected_pairs(P))
    top = stack[-1].stats
    assert 0 < top.extended_accepted < top.extended          # drafts really went past γ, and some failed
    assert 0 < top.sure_accepted < top.sure <= top.accepted + top.rejections


def test_extension_stops_at_the_cap_and_only_after_the_rounds_gamma():
    asked = []
    ext = Extension(0.5, cap=4, pays=lambda sure, base, drafted: asked.append((list(sure), base, drafted)) or True)
    assert not ext.more(2, 1)                    # γ not reached yet: no question of extending
    ext.seen = [0.9, 0.4]
    assert not ext.more(2, 2) and asked == []    # the last token was not sure: no pays() asked
    ext.seen = [0.4, 0.9]
    assert ext.more(2, 2) and asked == [([False, True], 2, 2)]   # each token classed by the Extension's bar
    ext.seen = [0.4, 0.9, 0.9, 0.9]
    assert not ext.more(2, 4)                    # at the cap


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


@pytest.mark.parametrize("gammas, extend", [([2, 4], None), ([1, 2], Extension(0.9, cap=6))])
def test_greedy_stack_is_the_target_argmax(gammas, extend):
    one_hot = lambda t: torch.nn.functional.one_hot(t.argmax(-1), V).float()
    stack = [ForcedLevel("drafter", one_hot(Q1), 0.0), ForcedLevel("retrieval", one_hot(Q2), 0.0),
             ForcedLevel("target", one_hot(P), 0.0)]
    decoder = SpecDecoder(stack, gammas, [0], torch.Generator().manual_seed(0), extend=extend)
    out = []
    while len(out) < 20:
        out += decoder.step(20 - len(out))
    expected, prev = [], 0
    for _ in range(20):
        prev = int(P[prev].argmax())
        expected.append(prev)
    assert out == expected
    assert (stack[-1].stats.extended > 0) == (extend is not None)   # one-hot rows are sure: drafts went on to the cap


def test_residual_sanity_for_the_tables():
    # the middle level's rejections matter: q1 and q2 differ enough that the residual is not q2
    assert total_variation(residual(Q2[0], Q1[0]), Q2[0]) > 0.1


def test_seq_reads_as_the_list_it_stands_for_and_never_changes():
    """speculate.Seq (the committed list's first n tokens plus drafts, no copy) reads as the list it
    stands for, stays so while the committed list grows, and shares its prefix without a scan."""
    committed = [5, 1, 4, 1, 5, 9, 2]
    seq = speculate.Seq(committed) + [6, 5]
    plain = committed + [6, 5]
    committed += [3, 5, 8]                                   # a later round commits more
    assert len(seq) == len(plain) and list(seq) == plain and seq == plain
    assert [seq[i] for i in range(-len(plain), len(plain))] == [plain[i] for i in range(-len(plain), len(plain))]
    for a in range(-10, 11):
        for b in (None, -1, 0, 3, 7, 8, 9, 12):
            assert seq[a:b] == plain[a:b], (a, b)
    with pytest.raises(IndexError):
        seq[len(plain)]
    later = speculate.Seq(committed) + [7]
    assert speculate.shared_prefix(seq, later) == speculate.shared_prefix(plain, committed + [7]) == 7
    assert speculate.shared_prefix(seq, later, 8) == 9        # `start` is trusted, and the scan goes on from it
