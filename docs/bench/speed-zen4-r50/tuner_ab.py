"""`--gamma auto`'s choice by one drafting table per lower γ (this round: gamma.choose, draft_seconds' rounds kept
per k) against a seconds_per_token call per γ pair (before), and `ar`, interleaved in one process on one kept
prefill: python tuner_ab.py S T NEW ROUNDS. Prints each request's ms/token, its time outside the passes and in
the tuner's hook, then medians."""
import os, sys, functools, itertools
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from interleave import interleave, timer
from triforce.runtime import gamma

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)


def old_draft_seconds(costs, alphas, gammas, level, n, memo=None):   # the code before, verbatim
    if level == 0:
        return n * costs[0](1)
    key = (level, gammas[:level])
    expected = memo.get(key) if memo is not None else None
    if expected is None:
        expected = [0.0]
    gamma_, alpha = gammas[level - 1], alphas[level - 1]
    for m in range(len(expected), n + 1):
        k = min(gamma_, m - 1)
        round_s = (old_draft_seconds(costs, alphas, gammas, level - 1, k, memo) if k else 0.0) + costs[level](k + 1)
        emitted = [alpha ** a * (1 - alpha) for a in range(k)] + [alpha ** k]
        expected.append(round_s + sum(p * expected[m - a - 1] for a, p in enumerate(emitted)))
    if memo is not None:
        memo[key] = expected
    return expected[n]


def old_choose(costs, alphas, allowed):
    memo, costs = {}, [functools.cache(c) for c in costs]
    return min(((g, gamma.seconds_per_token(costs, alphas, g, memo)) for g in itertools.product(*allowed)), key=lambda c: c[1])


new = (gamma.choose, gamma.draft_seconds)
spent = timer(gamma.GammaTuner, "__call__")
use = lambda fns: (lambda: (setattr(gamma, "choose", fns[0]), setattr(gamma, "draft_seconds", fns[1])))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), use(new)), "before": ({}, use((old_choose, old_draft_seconds))),
                              "tables": ({}, use(new))}, spent, "tuner")
