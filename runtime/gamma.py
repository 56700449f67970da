"""`--gamma auto`: γ1 and γ2 chosen from measured pass costs and the running acceptance.

The cost model is the planner's (offload/plan.py uses `expected_tokens` from here). A stack's
level i, verifying γ tokens proposed by the level below, spends per round γ·u(i-1) (the proposals)
plus one pass of γ+1 tokens, c_i(γ+1), and commits E(α_i, γ) = (1 - α_i^(γ+1)) / (1 - α_i) tokens
on average, where α_i is its acceptance. So its seconds per emitted token are

    u(0) = c_0(1)                                   the bottom level samples one token per pass
    u(i) = (γ·u(i-1) + c_i(γ+1)) / E(α_i, γ)        γ >= 1
    u(i) = c_i(1)                                   γ = 0: level i samples by itself

(seconds_per_token computes it exactly as speculate.draft schedules rounds: the last round of a
draft of n tokens proposes fewer, so the lower levels' γ matters only when the upper γ exceeds
it), and the tuner picks the γs minimizing u(top). γ2 = 0 is plain `ar` (the target alone), γ1 = 0
drops the drafter: on a machine where speculation does not pay, auto falls back to it.

Lossless whatever it picks: each round's γ depends only on past rounds, and every round emits
tokens of exactly the target's distribution (greedy: exactly `ar`'s tokens).
"""
from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import platform
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from triforce.runtime.decode import pass_timed, timed
from triforce.runtime.lookup import MAX_TOKENS as MAX_COPY

GAMMA_CAPS = (4, 16)        # largest γ1 (drafter -> middle) and γ2 (-> target) auto considers; γ2's also caps
                            # Extension (16 as lookup's copies: 32K and 7K greedy 2.3% faster than 12, round 51)
PRIOR_ACCEPTANCE = 0.6      # acceptance assumed before a level has verified anything
PRIOR_WEIGHT = 8            # ... worth this many tested tokens (per_token_acceptance)
EXPLORE_TOKENS = 12         # a level proposes at least 1 token, when its verifier runs, until it has drafted this many
REPROBE_ROUNDS = 32         # ... and again once it has drafted nothing for this many rounds (a level switched off
                            # gathers no evidence: an unlucky first sample, or text that changed, would keep it off)
ALPHA_STEP = 0.01           # acceptances are rounded to this before a choice (choices are memoized)
# Pass lengths timed once each at start-up (1, 2, 4, 5, 6, 8, 12 and each level's γ cap + 1, after one
# untimed pass that warms the level's caches), between them linear. A CPU pass's cost steps where its query rows need
# one more tile (the AMX kernel: T = 6 for G = 3, 18 rows; at 8K the target took 27.6 ms at T = 5 and
# 32.6 at T = 6: docs/BENCHMARKS.md, round 14), so 5 and 6 are both timed. The probe gives the shape;
# the passes the run makes give the level (corrected, every REFRESH_ROUNDS rounds).
# A short request times fewer lengths. The lower levels: about PROBE_SHARE of its tokens' worth of
# passes, at least T = 1 and the largest, then in the order below (at 2K a 32-token request paid
# 0.20-0.24 s of probe against a 0.4 s decode, 0.07-0.08 s now: docs/BENCHMARKS.md, round 18). The
# top level, whose passes cost the most: T = 1 and the largest, then the lengths below while its
# probe stays within TOP_PROBE_SHARE of the request's seconds on the target alone (new tokens x its
# 1-token pass). Timing every length cost a 128-token fp32 request 0.47 s at 7K (a fifth of its
# decode) and 1.08 s at 32K, more than `--gamma auto` saved there (round 23).
PROBE_ORDER = (5, 6, 2, 8, 12, 4)        # after 1 and the largest
PROBE_SHARE = 1 / 16
TOP_PROBE_SHARE = 1 / 32
REFRESH_ROUNDS = 8          # rounds between rescalings of the probed costs by the passes run since
# Extension (speculate.Extension): past γ2, the levels below go on drafting while the last token drawn had
# a top probability of at least EXTEND_CONFIDENCE (greedy: of the softmax of its logits; sampled: of the
# distribution it was drawn from, sharper at T < 1) and the next one's expected tokens are worth its cost
# (GammaTuner.extension_pays). Teacher-forced on the essays (round 45): greedy, middle-level drafts at 0.8
# or more agreed with the target every time at 7K and 32K; at T = 0.6 those at 0.99 or more passed 0.97-1.0
# of the time and those at 0.9-0.99 0.81-0.95. At 7K T = 0.6, ten requests each (one process): 8.63 ms/token
# without extension, 8.01 at 0.9, 6.88 at 0.99 (medians). Greedy, end to end (round 51, bar_ab.py, one process):
# 0.6 against 0.9 cut the target's passes 55 -> 43 at 32K (81% of the extra drafts passed; 20.34 -> 18.57
# ms/token with the host's memory slow, a tie with it fast, where the middle level's extra passes cost what the
# target's saved ones did) and 19 -> 17 at 7K (every one passed; 6.64 -> 6.42); 0.7, 0.5 and 0.4 gained less.
EXTEND_CONFIDENCE = {"greedy": 0.6, "sampled": 0.99}
EXTEND_PRIOR = 0.9          # an extension token's chance to pass before any has been tested ...
EXTEND_UNIT = 4             # ... and the drafting cost of one priced as that of EXTEND_UNIT tokens / EXTEND_UNIT
SEEN_PASSES = 8             # passes of a level before its probed costs are rescaled


def sure_bar(greedy: bool) -> float:
    """The top probability from which a proposer counts as sure of a draft (EXTEND_CONFIDENCE)."""
    return EXTEND_CONFIDENCE["greedy" if greedy else "sampled"]


def expected_tokens(alpha: float, gamma: int) -> float:
    """Tokens one verification round commits when each draft is accepted with probability alpha."""
    if alpha >= 1:
        return gamma + 1
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def per_token_acceptance(stats) -> float:
    """Estimated chance that one offered token is accepted (GammaTuner.alphas), smoothed by a prior
    of PRIOR_WEIGHT tested tokens at PRIOR_ACCEPTANCE. Extension tokens are left out: they were
    drafted because the proposer was sure of them, so they pass more often than the γ a round
    chooses would (extension_pays prices them by sure_acceptance)."""
    return smoothed_acceptance(stats.accepted - stats.extended_accepted, stats.rejections - stats.extended_rejections)


def sure_acceptance(stats) -> float:
    """Estimated chance that a draft token its proposer was sure of (speculate.Extension) passes,
    smoothed by a prior at EXTEND_PRIOR."""
    return smoothed_acceptance(stats.sure_accepted, stats.sure - stats.sure_accepted, EXTEND_PRIOR)


def unsure_acceptance(stats) -> float:
    """The same for the draft tokens its proposer was not sure of (smoothed as per_token_acceptance)."""
    unsure_accepted = stats.accepted - stats.sure_accepted
    return smoothed_acceptance(unsure_accepted, stats.rejections - (stats.sure - stats.sure_accepted))


def smoothed_acceptance(accepted: int, rejections: int, prior: float = PRIOR_ACCEPTANCE) -> float:
    """accepted / tested (a round tests tokens until its first rejection), with the prior's weight."""
    return (accepted + prior * PRIOR_WEIGHT) / (accepted + rejections + PRIOR_WEIGHT)


def rounded(alpha: float) -> float:
    """An acceptance rounded to ALPHA_STEP: what a memoized choice is keyed by."""
    return round(alpha / ALPHA_STEP) * ALPHA_STEP


@dataclass(frozen=True)
class PassCost:
    """Seconds of a T-token pass, measured at a few T and linear between (and beyond) them."""
    points: tuple[tuple[int, float], ...]   # (T, seconds), T ascending

    def __call__(self, T: int) -> float:
        pts = self.points
        if len(pts) == 1:
            return pts[0][1]
        for (t0, s0), (t1, s1) in zip(pts, pts[1:]):
            if T <= t1 or (t1, s1) == pts[-1]:
                return max(s0 + (s1 - s0) * (T - t0) / (t1 - t0), 0.0)
        raise AssertionError("unreachable")


def seconds_per_token(costs: list[PassCost], alphas: list[float], gammas: tuple[int, ...],
                      memo: dict | None = None) -> float:
    """Expected seconds per committed token of the stack (bottom first): a top-level round drafts
    γ tokens through the levels below (draft_seconds) and verifies them in one pass of γ + 1.
    memo: draft_seconds' results, shared by calls with the same costs and alphas (choose)."""
    top, g = len(costs) - 1, gammas[-1]
    return round_seconds(costs[top], alphas[-1], g, draft_seconds(costs, alphas, gammas, top - 1, g, memo) if g else 0.0)


def round_seconds(cost: PassCost, alpha: float, g: int, drafting: float) -> float:
    """Seconds per committed token of a top level whose rounds spend `drafting` seconds on g drafts and verify
    them in one pass of g + 1 (g = 0: it samples by itself)."""
    return cost(1) if g == 0 else (drafting + cost(g + 1)) / expected_tokens(alpha, g)


def draft_seconds(costs: list[PassCost], alphas: list[float], gammas: tuple[int, ...], level: int, n: int,
                  memo: dict | None = None) -> float:
    """Expected seconds for levels [0, level] to produce n tokens as speculate.draft does: rounds of
    k = min(γ, tokens left - 1) proposals, each emitting 1..k+1 tokens (a accepted drafts with
    probability α^a (1 - α), all k with α^k, plus the recovered or bonus token)."""
    return n * costs[0](1) if level == 0 else draft_table(costs, alphas, gammas, level, n, memo)[n]


def draft_table(costs: list[PassCost], alphas: list[float], gammas: tuple[int, ...], level: int, n: int,
                memo: dict | None = None) -> list[float]:
    """draft_seconds for every m in 0..n (at least): element m is the expected seconds to produce m tokens."""
    if level == 0:
        return [m * costs[0](1) for m in range(n + 1)]
    key = (level, gammas[:level])       # the levels below `level` use only these γs
    expected = memo.get(key) if memo is not None else None
    if expected is None:
        expected = [0.0]                # expected[m]: seconds to produce the last m tokens
    gamma, alpha = gammas[level - 1], alphas[level - 1]
    rounds = {}                         # k -> (a round's seconds, P(a accepted) for a = 0..k): past m = γ + 1, k stays γ
    for m in range(len(expected), n + 1):   # each m needs only smaller ones: extend what is known
        k = min(gamma, m - 1)
        if k not in rounds:
            rounds[k] = ((draft_seconds(costs, alphas, gammas, level - 1, k, memo) if k else 0.0) + costs[level](k + 1),
                         [alpha ** a * (1 - alpha) for a in range(k)] + [alpha ** k])
        round_s, emitted = rounds[k]
        expected.append(round_s + sum(p * expected[m - a - 1] for a, p in enumerate(emitted)))
    if memo is not None:
        memo[key] = expected
    return expected


def copy_length(cost: PassCost, alpha: float, most: int) -> int:
    """How many tokens the top level should take from a context-lookup copy (lookup.py): the n in
    1..most with the most expected tokens per second, expected_tokens(α, n) / cost(n + 1), α being
    a copied token's chance to pass. Where a wider pass costs little (a GPU, AVX-512 BF16) that is
    `most` unless copies are rarely right; where each token adds much (an AVX2 CPU: 13 tokens cost
    4.9x one at 7K) a short copy."""
    return best_offer(cost, alpha, 1, most)


def best_offer(cost: PassCost, alpha: float, least: int, most: int) -> int:
    """The n in least..most whose verify pass commits the most expected tokens per second,
    expected_tokens(α, n) / cost(n + 1) (the shorter on ties): a copy's length, or the γ of drafts
    that cost nothing (free_draft_seconds)."""
    return max(range(least, most + 1), key=lambda n: (expected_tokens(alpha, n) / cost(n + 1), -n))


def free_draft_seconds(cost: PassCost, alpha: float, most: int) -> tuple[float, int]:
    """The top level's seconds per token if the levels below drafted for free at its acceptance
    alpha: cost(γ + 1) / E(α, γ) at the best γ in 0..most (best_offer), and that γ (0: the top
    level alone does best, or most is 0: no room to draft). No stack whose top level runs these
    passes beats it, so where it is above an aim the top level's verify passes (their cost per
    token, or alpha) stand in the way, not the drafting; alpha = 1 gives the bound of drafts that
    are always right."""
    g = best_offer(cost, alpha, 0, most)
    return cost(g + 1) / expected_tokens(alpha, g), g


def choose(costs: list[PassCost], alphas: list[float], allowed: list[range]) -> tuple[tuple[int, ...], float]:
    """The γs (one per verifier, from `allowed`) with the fewest predicted seconds per token (the first of a
    tie, in itertools.product's order), as seconds_per_token prices each. Per choice of the γs below the top
    verifier's, the drafting seconds of every top γ are one table (draft_table), read instead of
    recomputed: the tuner chooses in most rounds, and a call per pair of γs took ~0.2 ms (round 50)."""
    memo, costs = {}, [functools.cache(c) for c in costs]   # each pass cost is interpolated once per T
    top, most, best = len(costs) - 1, max(allowed[-1]), None
    for lower in itertools.product(*allowed[:-1]):
        table = draft_table(costs, alphas, lower + (most,), top - 1, most, memo)   # [>= most + 1]
        for g in allowed[-1]:
            seconds = round_seconds(costs[top], alphas[-1], g, table[g])
            if best is None or seconds < best[1]:
                best = (lower + (g,), seconds)
    return best


def probe_lengths(largest: int, new_tokens: int) -> list[int]:
    """The pass lengths a probe times for a lower level whose largest pass is `largest`, for a
    request of `new_tokens`: 1, the largest and PROBE_ORDER's below it, as many as PROBE_SHARE of
    the tokens (at least the first two), ascending."""
    order = probe_order(largest)
    return sorted(order[:max(2, round(new_tokens * PROBE_SHARE))])


def probe_order(largest: int) -> list[int]:
    """1, the largest, then PROBE_ORDER's lengths below the largest."""
    return list(dict.fromkeys([1, largest] + [t for t in PROBE_ORDER if t < largest]))


def probe_pass_costs(stack, caps: tuple[int, ...], new_tokens: int) -> list[PassCost]:
    """Times T-token passes of every level on its real, filled cache (rolled back after each), after
    one untimed pass: its first passes after the prefill run slower (caches hold the other levels').
    The lower levels time their probe_lengths; the top level T = 1 and its largest pass, then
    probe_order's next lengths while its timed passes stay within TOP_PROBE_SHARE of new_tokens
    1-token passes (a length is priced by interpolating those timed before it)."""
    costs = []
    saved = [lv.cache.last_query.clone() if hasattr(lv.cache, "last_query") else None for lv in stack]
    for i, level in enumerate(stack):
        largest = 1 if i == 0 else caps[i - 1] + 1
        top = i == len(stack) - 1
        order = probe_order(largest) if top else probe_lengths(largest, new_tokens)
        pass_seconds(level, order[0])                          # warm-up
        points = {T: pass_seconds(level, T) for T in order[:2]}
        budget = TOP_PROBE_SHARE * new_tokens * points[1] - sum(points.values()) if top else float("inf")
        for T in order[2:]:
            price = PassCost(tuple(sorted(points.items())))(T)
            if price > budget:
                break
            points[T] = pass_seconds(level, T)
            budget -= points[T]
        costs.append(PassCost(non_decreasing(sorted(points.items()))))
    for level, last_query in zip(stack, saved):  # the retrieval rebuild scores chunks with it
        if last_query is not None:
            level.cache.last_query.copy_(last_query)
    return costs


def pass_seconds(level, T: int) -> float:
    """Seconds of one T-token pass of `level` on its cache, rolled back after."""
    x = torch.zeros(1, T, dtype=torch.long, device=level.model.device)  # [1, T]; values do not change the cost
    n = len(level.cached)                           # as Level.feed counts (a shard's cache answers no queries)
    forward = getattr(level, "forward", level.model)   # a level's replayed passes (runtime/graphs.py) priced as run,
    if hasattr(forward, "prime"):                       # ... once captured
        forward.prime(x, level.cache)
    _, seconds = pass_timed(forward, x, level.cache, device=level.model.device)   # [1, T, V]; a GPU drained
    level.cache.crop(n)
    return seconds


def non_decreasing(points) -> tuple[tuple[int, float], ...]:
    """(T, seconds) points, T ascending, each lowered to the least time of a pass at least as long:
    a pass of more tokens never costs less, so a time above a longer pass's is the machine's noise.
    The probe times one pass per length, and on a shared host one of them now and then reads 2x
    (at 32K: T = 8 took 105 ms against 55 and 72 at T = 6 and 12; docs/BENCHMARKS.md, round 18):
    left as it is, it prices its length, and the lengths interpolated beside it, out of the choice
    for the whole run, as the rescaling (corrected) keeps the probe's shape."""
    out, least = [], float("inf")
    for T, seconds in reversed(points):
        least = min(least, seconds)
        out.append((T, least))
    return tuple(reversed(out))


def corrected(probed: PassCost, recent) -> PassCost:
    """The probed costs at the level the run's own passes show: scaled by the median ratio of a
    pass's seconds to the probe's figure for its length, over the `recent` (T, seconds) passes of a
    length the probe spans. One ratio for every T keeps the probe's shape (the step at T = 6) and
    lets no single length, rarely run and once slow, lock itself out of the choice. Beyond the
    probed lengths the figure is an extrapolation: the drafter's probe times T = 1 alone, and its
    catch-up passes (the tokens the levels above committed, several at a time), priced as T = 1,
    scaled its cost 3-5x (0.3 → 0.9-1.4 ms a pass at 7K and 32K, round 49). Unchanged below
    SEEN_PASSES passes."""
    lo, hi = probed.points[0][0], probed.points[-1][0]
    ratios = [s / probed(T) for T, s in recent if lo <= T <= hi and probed(T) > 0]
    if len(ratios) < SEEN_PASSES:
        return probed
    scale = statistics.median(ratios)
    return PassCost(tuple((T, s * scale) for T, s in probed.points))


@dataclass
class GammaTuner:
    """The decoder's on_round hook under --gamma auto: after every round, re-picks the γs from the
    pass costs and each verifier's acceptance so far (smoothed by a prior). The costs are the
    start-up probe's, corrected every REFRESH_ROUNDS rounds by the passes the run made (on a CPU,
    where a pass's wall time is its cost; a GPU's calls return before their kernels finish)."""
    stack: list                               # the levels, bottom first
    costs: list[PassCost]                     # what the choice uses: probed, then corrected
    caps: tuple[int, ...]                     # largest γ per verifier
    probe_s: float = 0.0                      # seconds the start-up probe took
    reused: bool = False                      # the costs are an earlier request's (no probe)
    copies: bool = True                       # the top level verifies context-lookup copies (RunConfig.lookup)
    gammas: tuple[int, ...] = ()
    predicted: float = 0.0                    # seconds per token of the current choice
    chosen: Counter = field(default_factory=Counter)
    choices: dict = field(default_factory=dict)   # rounded acceptances -> (γs, seconds per token)
    copy_caps: dict = field(default_factory=dict) # rounded copy acceptance -> the top level's longest copy
    idle: list = field(init=False)                # per proposer: rounds since its drafted count last grew
    seen: list = field(init=False)                # per proposer: its drafted count at the last round
    probed: list = field(init=False)              # the start-up probe's costs
    rounds: int = 0

    def __post_init__(self) -> None:
        self.seen = [lv.stats.drafted for lv in self.stack[1:]]
        self.idle = [0] * len(self.seen)
        self.probed = list(self.costs)

    def refresh(self) -> None:
        """The probed costs corrected by the passes run since (gamma.corrected); the memoized
        choices go when the costs change."""
        costs = [corrected(probed, lv.times.recent) if timed_on_host(lv) else probed
                 for probed, lv in zip(self.probed, self.stack)]
        if costs != self.costs:
            self.costs, self.choices, self.copy_caps = costs, {}, {}

    @classmethod
    def start(cls, stack, caps: tuple[int, ...], new_tokens: int, known: list[PassCost] | None = None,
              copies: bool = True) -> "GammaTuner":
        """known: the costs an earlier request of the same shape ended with (Engine.pass_costs,
        keyed by engine.pass_cost_key): no probe then (0.25 s at 7K, 0.55 s at 32K here), and the
        run's passes rescale them as they would the probe's."""
        start = time.perf_counter()
        costs = list(known) if known is not None else probe_pass_costs(stack, caps, new_tokens)
        tuner = cls(stack, costs, caps, probe_s=0.0 if known is not None else time.perf_counter() - start,
                    reused=known is not None, copies=copies)
        tuner.pick()
        return tuner

    def alphas(self) -> list[float]:
        """Each verifier's per-token acceptance α, as the cost model means it: the chance that one
        offered token passes. A round offering k tokens tests them one by one until the first
        rejection, so it holds accepted successes and at most one failure; the tokens after a
        rejection were never tested. α = accepted / (accepted + rejections) is that chance's
        estimate; accepted / drafted (the reported `acceptance`) counts the untested tokens as
        failures and biased the choice towards short drafts (at 7K a per-token 0.977 read as
        0.94, and γ2 stayed at 2-3 where 5-6 paid)."""
        return [per_token_acceptance(lv.stats) for lv in self.stack[1:]]

    def pick(self) -> tuple[int, ...]:
        """The γs for the next round: the cost model's optimum over every γ (0 included), then
        exploration: a level that has drafted fewer than EXPLORE_TOKENS tokens, or nothing for
        REPROBE_ROUNDS rounds, proposes at least 1 in rounds that consult it (the drafter only when
        γ2 >= 2). Forcing γ1 >= 1 inside the optimum instead made the tuner shun every γ2 >= 2
        while a poor drafter explored."""
        alphas = tuple(rounded(a) for a in self.alphas())
        exploring = tuple(lv.stats.drafted < EXPLORE_TOKENS or rounds >= REPROBE_ROUNDS
                          for lv, rounds in zip(self.stack[1:], self.idle))
        key = (alphas, exploring)
        if key not in self.choices:
            gammas, predicted = choose(self.costs, list(alphas), [range(0, cap + 1) for cap in self.caps])
            explored = list(gammas)
            for i in reversed(range(len(explored))):   # the top verifier's proposer first
                if exploring[i] and explored[i] == 0 and self.caps[i] > 0 and all(g >= 2 for g in explored[i + 1:]):
                    explored[i] = 1
            if explored != list(gammas):
                gammas = tuple(explored)
                predicted = seconds_per_token(self.costs, list(alphas), gammas)
            self.choices[key] = (gammas, predicted)
        self.gammas, self.predicted = self.choices[key]
        return self.gammas

    def extension(self):
        """The decoder's Extension: drafts past γ2 while sure, up to the cap of γ2, as extension_pays says."""
        from triforce.runtime.speculate import Extension
        return Extension(self.sure_above(), self.caps[-1], self.extension_pays)

    def sure_above(self) -> float:
        """The top probability from which the top level's proposer counts as sure of a draft."""
        return sure_bar(getattr(getattr(self.stack[-2], "params", None), "greedy", True))

    def extension_pays(self, sure: list[bool], base: int, drafted: int) -> bool:
        """Whether one more draft token, after `drafted` (base of them the round's γ2; `sure`:
        whether the proposer was sure of each, as the Extension's bar classes them), is worth it:
        its cost (the levels below drafting it, priced per token over EXTEND_UNIT, and one more row
        in the top level's verify pass) against the tokens it adds in expectation (the chance that
        every draft so far passes, each at the acceptance of its kind, sure or not, times the
        chance that it passes too), at the seconds per token of the current choice: extending
        lowers the round's cost per token exactly when the extra token costs less per token it
        adds. The new token is priced as a sure one: it is drafted only after a draft the proposer
        was sure of, and such drafts come in runs. Priced at the target's mean per-token acceptance
        instead (which the doubtful drafts pull down: 0.76-0.89 in a 7K greedy request whose sure
        drafts all passed), extension stopped short: 7K greedy ran 7.30 / 7.14 ms/token against
        7.10 / 7.03; sampled requests (7K T = 0.6: -8%, -6%, +3% in three runs) and 32K, where a
        verify row costs ~5 ms, within the noise (docs/BENCHMARKS.md, round 46)."""
        top, alphas, stats = len(self.costs) - 1, self.alphas(), self.stack[-1].stats
        rates = {True: sure_acceptance(stats), False: unsure_acceptance(stats)}
        passed = 1.0
        for kind in sure[:drafted]:
            passed *= rates[kind]
        drafting = draft_seconds(self.costs, alphas, tuple(self.gammas), top - 1, EXTEND_UNIT) / EXTEND_UNIT
        row = self.costs[top](drafted + 2) - self.costs[top](drafted + 1)
        return drafting + row < self.predicted * passed * rates[True]

    def copy_acceptance(self) -> float:
        """The chance that one copied token passes the top level, from its copies so far (smoothed)."""
        top = self.stack[-1].stats
        return smoothed_acceptance(top.copied_accepted, top.copy_rejections)

    def copy_cap(self) -> int:
        """The top level's longest copy (SpecDecoder.copy_cap) for its copies' acceptance so far."""
        alpha = rounded(self.copy_acceptance())
        if alpha not in self.copy_caps:
            self.copy_caps[alpha] = copy_length(self.costs[-1], alpha, MAX_COPY)
        return self.copy_caps[alpha]

    def __call__(self, decoder) -> None:
        self.chosen[self.gammas] += 1
        drafted = [lv.stats.drafted for lv in self.stack[1:]]
        self.idle = [0 if now > before else rounds + 1 for now, before, rounds in zip(drafted, self.seen, self.idle)]
        self.seen = drafted
        self.rounds += 1
        if self.rounds % REFRESH_ROUNDS == 0:
            self.refresh()
        decoder.gammas = list(self.pick())
        decoder.copy_cap = self.copy_cap()

    def copy_predicted(self) -> float:
        """Seconds per token of a copy round (the top level verifying a context-lookup copy of
        copy_cap tokens, lookup.py): one pass of copy_cap + 1 over the tokens it commits on average
        at the copies' acceptance so far. Draft rounds are what `predicted` prices; which kind a
        round is depends on whether the lookup finds a copy, not on the γs."""
        cap = self.copy_cap()
        return self.costs[-1](cap + 1) / expected_tokens(self.copy_acceptance(), cap)

    def stats(self) -> dict:
        names = [lv.name for lv in self.stack]
        ar, cap = self.costs[-1](1), self.copy_cap()
        copy_s = self.copy_predicted() if self.copies else None
        reason = (f"gammas {list(self.gammas)}: predicted {1000 * self.predicted:.1f} ms/token against "
                  f"{1000 * ar:.1f} for the target alone, from acceptance "
                  + ", ".join(f"{n} {a:.2f}" for n, a in zip(names[1:], self.alphas()))
                  + (" and pass costs an earlier request measured" if self.reused else " and pass costs measured at start-up")
                  + (", corrected by the passes run since" if self.costs != self.probed else "")
                  + (f"; a round verifying a context copy of up to {cap} tokens instead: predicted "
                     f"{1000 * copy_s:.1f} ms/token" if self.copies else ""))
        copies = dict(copy_predicted_ms_per_token=round(1000 * copy_s, 3)) if self.copies else {}
        top = self.stack[-1].stats
        extension = dict(confidence=self.sure_above(), cap=self.caps[-1], tokens=top.extended,
                         accepted=top.extended_accepted, sure_acceptance=round(sure_acceptance(top), 4),
                         unsure_acceptance=round(unsure_acceptance(top), 4))
        free, free_g = free_draft_seconds(self.costs[-1], self.alphas()[-1], self.caps[-1])
        best, best_g = free_draft_seconds(self.costs[-1], 1.0, self.caps[-1])
        reason += (f"; with free drafts the target's own passes allow {1000 * free:.1f} ms/token at its acceptance "
                   f"(gamma2 {free_g}) and {1000 * best:.1f} with every draft right (gamma2 {best_g})")
        ceiling = dict(free_drafts_ms_per_token=round(1000 * free, 3), free_drafts_gamma2=free_g,
                       right_drafts_ms_per_token=round(1000 * best, 3), right_drafts_gamma2=best_g)
        return {"gamma": dict(
            policy="auto", gammas=list(self.gammas), predicted_ms_per_token=round(1000 * self.predicted, 3), **copies,
            target_alone_ms_per_token=round(1000 * ar, 3), probe_s=round(self.probe_s, 4), probe_reused=self.reused,
            pass_ms={n: {str(t): round(1000 * s, 3) for t, s in c.points} for n, c in zip(names, self.costs)},
            probe_pass_ms={n: {str(t): round(1000 * s, 3) for t, s in c.points} for n, c in zip(names, self.probed)},
            rounds_per_choice={",".join(map(str, g)): n for g, n in self.chosen.most_common()},
            copy_cap=cap, ceiling=ceiling, extension=extension,
            reason=reason)}


# ---- pass costs kept across processes ---------------------------------------------------------
# A request's final costs (probed, then corrected by its passes) are written under the cache dir,
# one file per shape (engine.pass_cost_key) and machine, so that a later `triforce generate` of
# the same shape on the same machine and build starts without the probe, as a later request on
# the same engine does. The run's passes rescale them as they would the probe's.

def stored_costs_dir() -> Path:
    """Where pass costs are kept: $TRIFORCE_CACHE/pass_costs."""
    from triforce.runtime.assets import cache_dir
    return cache_dir() / "pass_costs"


@functools.cache
def machine_fingerprint() -> str:
    """What pass costs depend on beyond a request's shape: the CPU and its cores, the GPU if any,
    torch's version and the native kernels' sources."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    from triforce.runtime.native import CSRC   # the sources and the headers they share (runs.h, simd.h)
    native = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(CSRC.glob("*.[ch]*")))).hexdigest()[:16]
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no gpu"
    return f"{cpu}, {os.cpu_count()} cpus, {gpu}, torch {torch.__version__}, native {native}"


def _stored_path(key: tuple) -> tuple[Path, str]:
    text = f"{key!r} on {machine_fingerprint()}"
    return stored_costs_dir() / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.json", text


def load_costs(key: tuple, levels: int) -> list[PassCost] | None:
    """The costs stored for `key` on this machine (a stack of `levels`), or None: none stored, or
    a file that does not parse or does not fit (written by another version: probed again)."""
    path, text = _stored_path(key)
    try:
        stored = json.loads(path.read_text())
        if stored["key"] != text or len(stored["levels"]) != levels:
            return None
        costs = [PassCost(tuple((int(T), float(s)) for T, s in points)) for points in stored["levels"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return costs if all(c.points and all(s > 0 for _, s in c.points) for c in costs) else None


def save_costs(key: tuple, costs: list[PassCost]) -> None:
    """Stores `costs` for `key` on this machine (atomically). A cache dir that cannot be written
    costs the next process a probe, not this request: one line on stderr, once per process."""
    from triforce.runtime.io_utils import atomic_write
    path, text = _stored_path(key)
    body = json.dumps(dict(key=text, levels=[[list(p) for p in c.points] for c in costs])).encode()
    try:
        atomic_write(path, lambda f: f.write(body))
    except OSError as e:
        if not _save_failed:
            _save_failed.append(path)
            print(f"triforce: --gamma auto could not store pass costs in {path.parent} ({e}); "
                  "each process will probe again (set TRIFORCE_CACHE to a writable directory)", file=sys.stderr)


_save_failed: list = []


def timed_on_host(level) -> bool:
    """Whether a level's pass times are its costs: its passes return when done (a CPU model, local
    or behind Ray shards) and it records them (speculate.Level.times)."""
    return hasattr(level, "times") and level.model.device.type == "cpu"


def auto_caps(levels: int, max_new_tokens: int) -> tuple[int, ...]:
    """The largest γ per verifier of a stack of `levels`: GAMMA_CAPS, and no verify pass longer than
    the tokens left to generate (the full cache holds the prompt + max_new_tokens)."""
    caps = GAMMA_CAPS[-(levels - 1):]
    return tuple(min(cap, max(0, max_new_tokens - 1)) for cap in caps)


def chain(*hooks):
    """One on_round hook calling each of `hooks` (None skipped) in order."""
    hooks = [h for h in hooks if h is not None]
    if len(hooks) <= 1:
        return hooks[0] if hooks else None

    def on_round(decoder) -> None:
        for hook in hooks:
            hook(decoder)
    return on_round
