"""What conf_ab.py and tuner_ab.py share: a function's time accumulated while it runs, and variants of one request
interleaved in one process on one kept prefill, each request's ms/token, time outside the passes and in the timed
function printed, then medians. Imported by those scripts (not run on its own)."""
import dataclasses, functools, statistics, time


def timer(owner, name: str) -> list:
    """Wraps owner.<name> so that its seconds add up in the returned one-element list (reset it per request)."""
    f, spent = getattr(owner, name), [0.0]

    @functools.wraps(f)
    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            spent[0] += time.perf_counter() - start

    setattr(owner, name, timed)
    return spent


def interleave(eng, run, ids, rounds: int, variants: dict, spent: list, label: str) -> None:
    """variants: name -> (RunConfig changes, a function that puts the variant's code in place)."""
    res, out, tim = ({v: [] for v in variants} for _ in range(3))
    for v, (kw, use) in variants.items():
        use()
        eng.generate(ids, dataclasses.replace(run, **kw))   # warm-up
    for r in range(rounds):
        for v, (kw, use) in variants.items():
            use()
            spent[0] = 0.0
            result = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
            st = result.stats
            res[v].append(st["ms_per_token"])
            out[v].append(1000 * (st["decode_s"] - sum(x["seconds"] for x in st["levels"].values())) / st["new_tokens"])
            tim[v].append(1000 * spent[0])
            print(f"  {r} {v:7s} {st['ms_per_token']:.2f} ms/token, outside the passes {out[v][-1]:.3f} ms/token, "
                  f"{label} {tim[v][-1]:.1f} ms, gammas {st.get('gamma', {}).get('rounds_per_choice')}, "
                  f"tokens {hash(tuple(result.token_ids)) % 10000}", flush=True)
    ar = statistics.median(res["ar"])
    for v in variants:
        m = statistics.median(res[v])
        print(f"{v:7s} median {m:.2f} ms/token ({ar / m:.2f}x ar), outside the passes {statistics.median(out[v]):.3f} "
              f"ms/token, {label} {statistics.median(tim[v]):.1f} ms a request")
