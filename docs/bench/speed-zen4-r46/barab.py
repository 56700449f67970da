"""The bar from which a proposer counts as sure (gamma.EXTEND_CONFIDENCE, which both the Extension and
the tuner's pricing read), swept in one process: each round samples another text (seed) under every bar.
python barab.py S T NEW ROUNDS BAR [BAR ...]   (T = 0: the greedy bar, else the sampled one)"""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import gamma as G

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
bars = [float(b) for b in sys.argv[5:]]
kind = "greedy" if T == 0 else "sampled"
args, eng, run, ids = triforce_request(S, T, NEW)
res = {b: [] for b in bars}; passes = {b: [] for b in bars}; ext = {b: [] for b in bars}
eng.generate(ids, run)
for r in range(R):
    for b in bars:
        G.EXTEND_CONFIDENCE[kind] = b
        st = eng.generate(ids, dataclasses.replace(run, seed=100 + r)).stats
        res[b].append(st["ms_per_token"]); passes[b].append(st["target_passes"])
        ext[b].append((st["gamma"]["extension"]["tokens"], st["gamma"]["extension"]["accepted"]))
    print(r, {b: (res[b][-1], passes[b][-1], ext[b][-1]) for b in bars}, flush=True)
for b in bars:
    wins = sum(x < y for x, y in zip(res[b], res[bars[-1]]))
    print(f"bar {b}: median ms/token {statistics.median(res[b]):.3f} mean {statistics.mean(res[b]):.3f}, target passes "
          f"{statistics.mean(passes[b]):.1f}, extension tokens {sum(e for e, _ in ext[b])} passed {sum(a for _, a in ext[b])}, "
          f"faster than bar {bars[-1]} in {wins} of {R}")
