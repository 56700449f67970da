"""Speculative acceptance (Leviathan et al. 2023; Chen et al. 2023): a pure tensor function.

A drafter proposed K tokens x_0..x_{K-1} with its distributions q_i; the verifier scored the
same positions with p_i, plus one more position p_K. Walking left to right, x_i is *accepted*
with probability min(1, p_i(x_i) / q_i(x_i)). At the first rejection the round ends with a
*recovered* token drawn from the residual norm(max(0, p_i - q_i)); if all K are accepted it
ends with a *bonus* token drawn from p_K. Each emitted token is then distributed exactly
as the verifier would have sampled it, whatever q is: this is what makes TriForce lossless.

TriForce stacks the rule twice: drafter -> middle level (target weights on the retrieval
cache), then middle level -> target (full cache). The middle level's drafted tokens are the
tokens its own accept rounds emitted, and its q is its own probs_from_logits output. The
residual must be used at *both* levels: sampling a rejected middle-level token from the
middle level's p instead (as the reference implementation does) makes the middle level's
output differ from its stated q, and the target's acceptance then no longer restores p.

Nothing here touches a model, a cache or the host: no .item(), no .tolist().
"""
from __future__ import annotations

import torch

from triforce.runtime.sampling import _native_sampling, sample, sample_excess


def accept(
    draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One verification round for each row of the batch, rows independent.

    # draft_tokens  [B, K]      tokens proposed by the drafter
    # draft_probs   [B, K, V]   the drafter's q at each drafted position
    # target_probs  [B, K+1, V] the verifier's p at each drafted position, plus the bonus position
    # generator     torch.Generator on the probs' device (seeded: the round is reproducible)
    Returns:
    # num_accepted  [B] int64 in [0, K]: the row's accepted tokens are draft_tokens[b, :n]
    # next_token    [B] int64: the recovered token (n < K) or the bonus token (n == K)
    """
    B, K = draft_tokens.shape
    if K == 0:  # nothing drafted: the round is plain sampling from the verifier
        return draft_tokens.new_zeros(B), sample(target_probs[:, 0], generator)

    kernel = _native_accept(draft_probs, target_probs)
    if kernel is not None:   # the same rule in one native call, the same uniforms drawn in the same order
        u = torch.rand((B, K), generator=generator, dtype=target_probs.dtype)
        u_next = torch.rand((B,), generator=generator, dtype=torch.float64)
        return kernel.accept_rows(draft_tokens, draft_probs, target_probs, u, u_next)

    tokens = draft_tokens.unsqueeze(-1)                                  # [B, K, 1]
    p_drafted = target_probs[:, :K].gather(-1, tokens).squeeze(-1)       # [B, K] p_i(x_i)
    q_drafted = draft_probs.gather(-1, tokens).squeeze(-1)               # [B, K] q_i(x_i)

    # Accept x_i iff u_i < p_i(x_i) / q_i(x_i), i.e. with probability min(1, p/q). Multiplying
    # instead of dividing keeps q == 0 harmless. All K uniforms are drawn at once; those after
    # a row's first rejection are simply never looked at.
    u = torch.rand((B, K), generator=generator, device=p_drafted.device, dtype=p_drafted.dtype)
    accepted = u * q_drafted < p_drafted                                 # [B, K] bool

    # Tokens after the first rejection do not count even if their own test passed.
    num_accepted = accepted.long().cumprod(dim=-1).sum(dim=-1)           # [B]
    all_accepted = num_accepted == K                                     # [B]

    rows = torch.arange(B, device=draft_tokens.device)
    p_next = target_probs[rows, num_accepted]                            # [B, V]
    # Bonus rows have no q at position K: theirs is zeroed (the clamp only indexes something),
    # so that their excess max(0, p - 0) is p itself.
    q_next = draft_probs[rows, num_accepted.clamp(max=K - 1)] * ~all_accepted.unsqueeze(-1)   # [B, V]
    return num_accepted, sample_excess(p_next, q_next, generator)       # sample() normalizes


def accept_greedy(draft_tokens: list[int], target_best: list[int]) -> tuple[int, int]:
    """accept() at temperature 0, where every distribution is one-hot: p_i at target_best[i] (the
    verifier's argmax, K + 1 of them) and q_i at draft_tokens[i] (a greedy proposer drafts its own
    argmax; a context copy is one-hot by definition). A draft passes iff u * q_i(x_i) = u < p_i(x_i),
    that is iff it is the verifier's argmax; the residual max(0, p_i - q_i) at the first miss, and
    p_K after K passes, are one-hot at the verifier's argmax. So the drafts up to the first miss are
    accepted and the verifier's argmax follows. No uniforms are drawn (nothing at T = 0 reads them).
    Returns (accepted count n, the next token)."""
    n = 0
    while n < len(draft_tokens) and draft_tokens[n] == target_best[n]:
        n += 1
    return n, target_best[n]


def emitted_tokens(
    draft_tokens: torch.Tensor,
    num_accepted: torch.Tensor,
    next_token: torch.Tensor,
    pad_id: int = -1,
) -> torch.Tensor:
    """The round's output per row: accepted tokens, then the recovered or bonus token, then pad.

    Row b holds num_accepted[b] + 1 real tokens. In the hierarchy, the middle level's emitted
    tokens (concatenated over its rounds) are the draft the target verifies.

    # draft_tokens  [B, K]
    # num_accepted  [B]
    # next_token    [B]
    # returns       [B, K+1] int64
    """
    B, K = draft_tokens.shape
    positions = torch.arange(K + 1, device=draft_tokens.device)          # [K+1]
    n = num_accepted.unsqueeze(-1)                                       # [B, 1]
    padded = torch.cat([draft_tokens, draft_tokens.new_full((B, 1), pad_id)], dim=-1)  # [B, K+1]
    out = torch.where(positions < n, padded, pad_id)                     # accepted prefix
    return torch.where(positions == n, next_token.unsqueeze(-1), out)    # recovered / bonus


def _native_accept(draft_probs: torch.Tensor, target_probs: torch.Tensor):
    """The native sampling module (csrc/sampling_cpu.cpp accept_rows) where it serves this round
    (fp32 CPU rows), else None: the torch ops above run."""
    if draft_probs.dtype != torch.float32:
        return None
    return _native_sampling(target_probs)
