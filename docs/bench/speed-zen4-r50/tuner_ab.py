"""`--gamma auto`'s choice by one drafting table per lower γ (this round: gamma.choose, draft_seconds' rounds kept
per k) against a seconds_per_token call per γ pair (before), and `ar`, interleaved in one process on one kept
prefill: python tuner_ab.py S T NEW ROUNDS. Prints each request's ms/token, its time outside the passes and in
the tuner's hook, then medians."""
import os, sys, dataclasses, statistics, time, functools, itertools
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
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
spent = [0.0]
hook = gamma.GammaTuner.__call__


@functools.wraps(hook)
def timed_hook(self, decoder):
    t = time.perf_counter()
    try:
        return hook(self, decoder)
    finally:
        spent[0] += time.perf_counter() - t


gamma.GammaTuner.__call__ = timed_hook
variants = {"ar": (dict(mode="ar"), new), "before": (dict(), (old_choose, old_draft_seconds)), "tables": (dict(), new)}
res, out, tun = ({v: [] for v in variants} for _ in range(3))
for v, (kw, fns) in variants.items():
    gamma.choose, gamma.draft_seconds = fns
    eng.generate(ids, dataclasses.replace(run, **kw))   # warm-up
for r in range(R):
    for v, (kw, fns) in variants.items():
        gamma.choose, gamma.draft_seconds = fns
        spent[0] = 0.0
        result = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
        st = result.stats
        res[v].append(st["ms_per_token"])
        out[v].append(1000 * (st["decode_s"] - sum(x["seconds"] for x in st["levels"].values())) / st["new_tokens"])
        tun[v].append(1000 * spent[0])
        print(f"  {r} {v:6s} {st['ms_per_token']:.2f} ms/token, outside the passes {out[v][-1]:.3f} ms/token, "
              f"tuner {tun[v][-1]:.1f} ms, gammas {st.get('gamma', {}).get('rounds_per_choice')}, "
              f"tokens {hash(tuple(result.token_ids)) % 10000}", flush=True)
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:6s} median {m:.2f} ms/token ({ar / m:.2f}x ar), outside the passes {statistics.median(out[v]):.3f} "
          f"ms/token, tuner {statistics.median(tun[v]):.1f} ms a request")
