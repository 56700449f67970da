"""Extension's cap (the most tokens a round's draft may reach, GAMMA_CAPS' γ2 cap) swept in one process: a
text per round at T > 0, the same seeds under every cap. python capab.py S T NEW ROUNDS CAP [CAP ...]"""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import gamma as G

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
caps = [int(c) for c in sys.argv[5:]]
args, eng, run, ids = triforce_request(S, T, NEW)
extension = G.GammaTuner.extension
res = {c: [] for c in caps}; passes = {c: [] for c in caps}
eng.generate(ids, run)
for r in range(R):
    for c in caps:
        G.GammaTuner.extension = lambda self, c=c: dataclasses.replace(extension(self), cap=c)
        st = eng.generate(ids, dataclasses.replace(run, seed=400 + r)).stats
        res[c].append(st["ms_per_token"]); passes[c].append(st["target_passes"])
    print(r, {c: (res[c][-1], passes[c][-1]) for c in caps}, flush=True)
for c in caps:
    print(f"cap {c}: median ms/token {statistics.median(res[c]):.3f} mean {statistics.mean(res[c]):.3f}, target passes {statistics.mean(passes[c]):.1f}")
