"""Does --gamma auto pick well? In one process: auto against fixed γs (extension still on, priced
as auto prices it). python fixedab.py S T NEW ROUNDS g1,g2 [g1,g2 ...]"""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import gamma as G

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fixed = [tuple(int(x) for x in a.split(",")) for a in sys.argv[5:]]
args, eng, run, ids = triforce_request(S, T, NEW)
auto_pick = G.GammaTuner.pick


def fixed_pick(gammas):
    def pick(self):
        auto_pick(self)                      # keeps the bookkeeping; then the fixed choice, priced
        self.gammas = gammas
        self.predicted = G.seconds_per_token(self.costs, self.alphas(), gammas)
        return gammas
    return pick


variants = {"auto": auto_pick, **{",".join(map(str, g)): fixed_pick(g) for g in fixed}}
res = {k: [] for k in variants}
eng.generate(ids, run)
for r in range(R):
    for name, pick in variants.items():
        G.GammaTuner.pick = pick
        st = eng.generate(ids, dataclasses.replace(run, seed=r)).stats
        res[name].append(st["ms_per_token"])
        lv = st["levels"]
        print(name, r, st["ms_per_token"], "passes", st["target_passes"], "s", {k: v["seconds"] for k, v in lv.items()},
              "ext", st["gamma"]["extension"]["tokens"], dict(list(st["gamma"]["rounds_per_choice"].items())[:3]), flush=True)
for k, v in res.items():
    print(k, "median ms/token %.3f mean %.3f" % (statistics.median(v), statistics.mean(v)), v)
