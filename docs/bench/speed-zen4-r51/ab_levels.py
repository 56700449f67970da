"""What bar_ab.py, cap_ab.py and copy_ab.py share: variants of one request (each a RunConfig change and a function
that puts the variant's setting in place) and `ar`, interleaved in one process on one kept prefill, each request's
ms/token, the target's passes and extension tokens, the middle level's time and copies printed, then medians.
Imported by those scripts (not run on its own)."""
import dataclasses, statistics


def interleave(eng, run, ids, rounds: int, variants: dict) -> None:
    """variants: name -> (RunConfig changes, a function that puts the variant's setting in place); "ar" among them."""
    res = {v: [] for v in variants}
    for v, (kw, use) in variants.items():   # warm-up (a setting that changes the γ caps probes once here)
        use()
        eng.generate(ids, dataclasses.replace(run, **kw))
    for r in range(rounds):
        for v, (kw, use) in variants.items():
            use()
            result = eng.generate(ids, dataclasses.replace(run, seed=r, **kw))
            st = result.stats
            res[v].append(st["ms_per_token"])
            tgt, mid = st["levels"]["target"], st["levels"].get("retrieval", {})
            print(f"  {r} {v:8s} {st['ms_per_token']:.2f} ms/token | target passes {tgt['passes']} {tgt['seconds']:.3f} s, "
                  f"extended {tgt.get('extended')}/{tgt.get('extended_accepted')}, middle {mid.get('seconds', 0):.3f} s, "
                  f"copies {mid.get('copied')}/{mid.get('copied_accepted')}, drafted {mid.get('drafted')}/{mid.get('accepted')} "
                  f"| tokens {hash(tuple(result.token_ids)) % 10000}", flush=True)
    ar = statistics.median(res["ar"])
    for v in variants:
        m = statistics.median(res[v])
        print(f"{v:8s} median {m:.2f} ms/token ({ar / m:.3f}x ar)")
