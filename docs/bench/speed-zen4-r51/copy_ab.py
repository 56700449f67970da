"""The middle level's context copies (lookup.copy with min_match NGRAM: the levels below the target) under other
rules, against the runtime's, and `ar`, interleaved in one process on one kept prefill: python copy_ab.py S T NEW
ROUNDS VARIANT... (VARIANT: cur | none | matchN (a match of at least N tokens) | capN (at most N tokens copied)).
Prints each request's ms/token and the middle level's copies (taken / accepted), then medians."""
import dataclasses, os, statistics, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from triforce.runtime import lookup

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5:]
args, eng, run, ids = triforce_request(S, T, NEW)
real = lookup.ContextLookup.copy


def rule(name):
    def copy(self, seq, room, min_match):
        if min_match != lookup.NGRAM or name == "cur":
            return real(self, seq, room, min_match)
        if name == "none":
            return []
        if name.startswith("match"):
            return real(self, seq, room, int(name[5:]))
        return real(self, seq, min(room, int(name[3:])), min_match)
    return copy


variants = {"ar": dict(mode="ar"), **{n: {} for n in names}}
res = {v: [] for v in variants}
for v, kw in variants.items():   # warm-up
    lookup.ContextLookup.copy = rule(v if v != "ar" else "cur")
    eng.generate(ids, dataclasses.replace(run, **kw))
for r in range(R):
    for v, kw in variants.items():
        lookup.ContextLookup.copy = rule(v if v != "ar" else "cur")
        st = eng.generate(ids, dataclasses.replace(run, seed=r, **kw)).stats
        res[v].append(st["ms_per_token"])
        mid = st["levels"].get("retrieval", {})
        tgt = st["levels"]["target"]
        print(f"  {r} {v:8s} {st['ms_per_token']:.2f} ms/token | middle passes {mid.get('passes')} "
              f"{mid.get('seconds', 0):.3f} s, copies {mid.get('copied')}/{mid.get('copied_accepted')}, drafted "
              f"{mid.get('drafted')}/{mid.get('accepted')} | target passes {tgt['passes']} {tgt['seconds']:.3f} s", flush=True)
ar = statistics.median(res["ar"])
for v in variants:
    m = statistics.median(res[v])
    print(f"{v:8s} median {m:.2f} ms/token ({ar / m:.3f}x ar)")
