"""Logits -> probabilities (temperature, top-k, top-p), sampling, and the residual distribution.

The same `probs_from_logits` is applied at every level of the hierarchy (drafter, retrieval
middle level, full target), so every level speculates against the distribution it will be
verified with. Greedy decoding is not a separate path: temperature 0 yields a one-hot
distribution at the argmax, and speculative acceptance on one-hot rows reduces exactly to
"accept iff the argmaxes agree, else emit the verifier's argmax" (see runtime/accept.py).
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import torch

from triforce.runtime.errors import UserError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy (exact argmax, no division); > 0 divides the logits
    top_p: float = 1.0        # nucleus: keep the smallest set of tokens holding >= top_p mass; 1 = off
    top_k: int = 0            # keep only the k most likely tokens (ties at the k-th are kept); 0 = off

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def validate(self) -> "SamplingParams":
        t, p, k = self.temperature, self.top_p, self.top_k
        if not (isinstance(t, numbers.Real) and math.isfinite(t) and t >= 0):
            raise UserError(f"temperature {t!r} must be a finite number >= 0 (0 = greedy)")
        # Written as "not (in range)" so that NaN, which fails every comparison, is refused too.
        if not (isinstance(p, numbers.Real) and 0.0 < p <= 1.0):
            raise UserError(f"top_p {p!r} must be in (0, 1] (1 = off)")
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise UserError(f"top_k {k!r} must be an integer >= 0 (0 = off)")
        return self


def probs_from_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """The distribution a level samples from and is verified with.

    # logits  [..., V] any float dtype
    # returns [..., V] float32, rows sum to 1
    """
    logits = logits.float()
    kernel = _native_probs(logits, params)
    if kernel is not None:   # the same definition in one native pass per row (csrc/sampling_cpu.cpp)
        flat = logits.reshape(-1, logits.shape[-1])                      # [N, V]
        return kernel.probs_rows(flat, params.temperature, params.top_p).reshape(logits.shape)
    return probs_from_logits_reference(logits, params)


def top_probability(logits: torch.Tensor) -> torch.Tensor:
    """Each row's largest probability under softmax(logits): how sure a greedy level is of its
    argmax (speculate.top_probabilities). On a CPU one native read of the row, nothing [N, V] written.

    # logits  [..., V] any float dtype
    # returns [...] float32
    """
    logits = logits.float()
    flat = logits.reshape(-1, logits.shape[-1])                          # [N, V]
    kernel = _native_sampling(flat)
    if kernel is not None:
        return kernel.top_probability_rows(flat).reshape(logits.shape[:-1])
    return top_probability_reference(logits)


def greedy_tokens(logits: torch.Tensor) -> list[int]:
    """Each row's token at temperature 0: the first index of its maximum (a NaN wins), where
    probs_from_logits puts its one-hot. On a CPU one native read of the row, nothing [N, V] written.

    # logits  [N, V] any float dtype
    # returns N token ids
    """
    flat = logits.float()
    kernel = _native_sampling(flat)
    best = kernel.argmax_rows(flat) if kernel is not None else flat.argmax(dim=-1)
    return best.tolist()


def top_probability_reference(logits: torch.Tensor) -> torch.Tensor:
    """top_probability in torch ops (any device). logits [..., V] float32 -> [...]"""
    return torch.softmax(logits, dim=-1).amax(dim=-1)


def _native_probs(logits: torch.Tensor, params: SamplingParams):
    """The native kernel where it serves this call (CPU, top_k off, a vocabulary axis), else None."""
    if params.top_k or logits.dim() == 0:
        return None
    return _native_sampling(logits)


def probs_from_logits_reference(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """probs_from_logits in torch ops: the definition (any device, top_k included).

    # logits  [..., V] float32
    # returns [..., V] float32, rows sum to 1
    """
    if params.greedy:
        # One-hot at the argmax: no division by temperature 0, hence no NaN, and -inf or huge
        # logits are harmless. torch.argmax breaks ties by the lowest index.
        best = logits.argmax(dim=-1, keepdim=True)                       # [..., 1]
        return torch.zeros_like(logits).scatter_(-1, best, 1.0)

    # Shift so the row maximum is 0 before dividing: logits / 0.01 overflows float32 for logits
    # near 1e36, while (logits - max) / t only ever moves values towards -inf, where exp is 0.
    # Softmax is shift-invariant, so the distribution is unchanged. (A row of all -inf, or one
    # holding +inf, has no distribution; it yields NaN as in torch.softmax.)
    scaled = (logits - logits.amax(dim=-1, keepdim=True)) / params.temperature   # [..., V]
    scaled = _keep_top_k(scaled, params.top_k)
    probs = torch.softmax(scaled, dim=-1)
    return _keep_top_p(probs, params.top_p)


def _keep_top_k(scaled: torch.Tensor, k: int) -> torch.Tensor:
    """Set every logit below the k-th largest to -inf. Ties at the k-th value are all kept, so
    the kept set does not depend on the order of equal logits."""
    if k == 0 or k >= scaled.shape[-1]:
        return scaled
    kth = scaled.topk(k, dim=-1).values[..., -1:]                        # [..., 1]
    return scaled.masked_fill(scaled < kth, float("-inf"))


NUCLEUS_CANDIDATES = 512   # most likely tokens searched for the nucleus first; a full sort only if it is wider


def _keep_top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p, then renormalize.

    A token is kept iff the mass strictly before it (in descending order, equal probabilities in
    index order) is < top_p; the top token has 0 before it, so it is always kept however small
    top_p is.
    """
    if top_p >= 1.0:
        return probs
    keep = _nucleus_among_top(probs, top_p)
    if keep is None:
        keep = _nucleus_by_sort(probs, top_p)
    kept = torch.where(keep, probs, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def _nucleus_by_sort(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The definition, written out: a stable descending sort of the whole row (V log V: 3.7 ms a
    row for V = 49,152 on 2 cores, more than a drafter pass)."""
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)   # [..., V]
    mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs                 # [..., V]
    return torch.empty_like(order, dtype=torch.bool).scatter_(-1, order, mass_before < top_p)


def _nucleus_among_top(probs: torch.Tensor, top_p: float) -> torch.Tensor | None:
    """The same set from the NUCLEUS_CANDIDATES largest probabilities (~0.2 ms a row), or None
    when some row's nucleus may be wider than that. The sorted values, hence the count m of kept
    tokens, are those of the full sort; the kept ids are every token above the m-th value plus,
    among tokens equal to it, the lowest ids (the stable sort's order)."""
    k = min(NUCLEUS_CANDIDATES, probs.shape[-1])
    top = probs.topk(k, dim=-1).values                                       # [..., k] descending
    m = ((top.cumsum(dim=-1) - top) < top_p).sum(dim=-1, keepdim=True)       # [..., 1] kept count
    if k < probs.shape[-1] and bool((m >= k).any()):  # host sync: the nucleus may reach past the candidates
        return None
    last = top.gather(-1, m - 1)                                             # [..., 1] the m-th value
    at_least = probs >= last                                                 # [..., V]
    if bool((at_least.sum(dim=-1, keepdim=True) == m).all()):  # host sync; no tie reaches past the m-th
        return at_least
    above, tied = probs > last, probs == last                                # [..., V]
    need = m - above.sum(dim=-1, keepdim=True)                               # [..., 1] tied tokens kept
    return above | (tied & (tied.cumsum(dim=-1) <= need))


def sample(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One token per row, reproducible for a seeded generator (on the same device as probs).

    Inverse CDF: one uniform u per row and the first token whose cumulative mass (fp64) exceeds
    u times the row's mass. Rows need not sum to 1 (the residual's excess is drawn from as it
    is). A token of weight 0 adds nothing to the sum, so it can never be drawn, and a one-hot
    (greedy) row always gives its argmax. torch.multinomial draws one exponential per vocabulary
    entry (0.9 ms a row for V = 49,152 on 2 cores, once per round at every level); this is a
    cumulative sum and a binary search (~0.05 ms), or on the CPU for fp32 rows one native pass
    (csrc/sampling_cpu.cpp sample_excess, 6-8 us).

    # probs   [..., V] (typically [B, V]) non-negative weights
    # returns [...] int64
    """
    return _inverse_cdf(probs, None, generator)


def sample_excess(p: torch.Tensor, q: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """sample(excess(p, q), generator), the same token for the same generator state; on the CPU in
    one native pass (csrc/sampling_cpu.cpp sample_excess) instead of ~10 over V.

    # p, q    [..., V] verifier and drafter distributions
    # returns [...] int64
    """
    return _inverse_cdf(p, q, generator)


def _inverse_cdf(p: torch.Tensor, q: torch.Tensor | None, generator: torch.Generator) -> torch.Tensor:
    """sample() of p, or of excess(p, q) when q is given."""
    flat = p.reshape(-1, p.shape[-1])                                    # [N, V]
    u = torch.rand((flat.shape[0], 1), generator=generator, dtype=torch.float64, device=flat.device)
    kernel = _native_sampling(flat)
    if kernel is not None:
        qf = None if q is None else q.reshape(flat.shape).float()
        return kernel.sample_excess(flat, qf, u[:, 0]).reshape(p.shape[:-1])   # flat is fp32 already
    if q is not None:
        flat = excess(flat, q.reshape(flat.shape))
    cdf = flat.double().cumsum(dim=-1)                                   # [N, V]
    mass = cdf[:, -1:]                                                   # [N, 1]
    # u < 1, but u * mass may round up to mass (probability ~2^-53); below mass, the first cdf
    # entry above the target always belongs to a token of positive weight.
    target = torch.minimum(u * mass, torch.nextafter(mass, torch.zeros_like(mass)))
    drawn = torch.searchsorted(cdf, target, right=True).clamp_(max=flat.shape[-1] - 1)   # [N, 1]
    return drawn.reshape(p.shape[:-1])


def _native_sampling(flat: torch.Tensor):
    """The native sampling module for fp32 rows of a CPU tensor, else None (the torch path)."""
    if flat.device.type != "cpu" or flat.dtype != torch.float32 or flat.shape[-1] == 0:
        return None
    from triforce.runtime.native import sampling_cpu
    return sampling_cpu()


def excess(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """max(0, p - q), unnormalized: the weights a rejected draft samples its recovered token from
    (sample() normalizes). Where it has no mass, p.

    # p, q    [..., V] verifier and drafter distributions
    # returns [..., V]
    """
    e = (p - q).clamp_min(0.0)                                           # [..., V]
    # In exact arithmetic a rejection implies p(x) < q(x) for the drafted x, hence mass > 0.
    # Float round-off can still leave no mass when p and q agree to the last bit elsewhere; then
    # p itself is the right answer (p == q means the residual is undefined and p is what the
    # verifier wants).
    return e + p * (e.sum(dim=-1, keepdim=True) == 0)                    # e is all 0 where p is added


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)): where a rejected draft samples its recovered token from.

    # p, q    [..., V] verifier and drafter distributions
    # returns [..., V]
    """
    e = excess(p, q)
    return e / e.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)
