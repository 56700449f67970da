"""Where the decode's time outside the passes goes, per request: python outside.py S T NEW ROUNDS"""
import os, sys, dataclasses, time, collections, functools
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import speculate, gamma, lookup, engine as E
S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
acc, cnt = collections.Counter(), collections.Counter()
def wrap(obj, name, label):
    f = getattr(obj, name)
    @functools.wraps(f)
    def g(*a, **k):
        t = time.perf_counter()
        try: return f(*a, **k)
        finally: acc[label] += time.perf_counter() - t; cnt[label] += 1
    setattr(obj, name, g)
wrap(gamma.GammaTuner, "__call__", "tuner.on_round")
wrap(gamma.GammaTuner, "extension_pays", "tuner.extension_pays")
wrap(gamma, "choose", "gamma.choose")
wrap(lookup.ContextLookup, "extend", "lookup.extend")
wrap(lookup.ContextLookup, "copy", "lookup.copy")
wrap(speculate, "accept", "accept")
wrap(speculate, "probs_from_logits", "probs_from_logits")
wrap(speculate.Level, "confidences", "confidences")
wrap(speculate.Level, "commit", "commit")
wrap(speculate, "pass_timed", "pass_timed")
wrap(speculate.Level, "feed", "feed")
wrap(speculate, "verify_round", "verify_round")
wrap(E, "decode", "decode")
eng.generate(ids, run)
for mode in ["ar", "triforce"]:
    for r in range(R):
        acc.clear(); cnt.clear()
        st = eng.generate(ids, dataclasses.replace(run, mode=mode, seed=r)).stats
        lv = sum(x["seconds"] for x in st["levels"].values())
        print(mode, st["ms_per_token"], "decode_s", st["decode_s"], "levels", round(lv, 4), "outside", round(st["decode_s"] - lv, 4), flush=True)
        print("   ", {k: (round(v * 1000, 1), cnt[k]) for k, v in sorted(acc.items())}, flush=True)
