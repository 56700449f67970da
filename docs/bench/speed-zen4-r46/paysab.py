"""How should extension price its next draft? GammaTuner.extension_pays variants interleaved in one process,
a text per round at T > 0 (the same seeds under every variant):
    FACTOR    the rule before a2fd57b (the next draft at the target's mean per-token acceptance) against a
              rate scaled by FACTOR (1.0: as it was; < 1 extends less)
    sure      the next draft at the acceptance of sure drafts (the runtime since a2fd57b)
    extacc    at the acceptance extension tokens have had (smoothed towards EXTEND_PRIOR)
    measured  extacc, with drafting priced at the lower levels' seconds per token proposed to the target so far
python paysab.py S T NEW ROUNDS VARIANT [VARIANT ...]"""
import dataclasses, math, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import gamma as G

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
names = sys.argv[5:]
args, eng, run, ids = triforce_request(S, T, NEW)


def model_drafting(self, top):
    return G.draft_seconds(self.costs, self.alphas(), tuple(self.gammas), top - 1, G.EXTEND_UNIT) / G.EXTEND_UNIT


def measured_drafting(self, top):
    drafted = self.stack[-1].stats.drafted
    return sum(lv.stats.seconds for lv in self.stack[:-1]) / drafted if drafted >= G.EXPLORE_TOKENS else model_drafting(self, top)


NEXT = {"mean": lambda self, stats: self.alphas()[-1],
        "sure": lambda self, stats: G.sure_acceptance(stats),
        "extacc": lambda self, stats: G.smoothed_acceptance(stats.extended_accepted, stats.extended_rejections, G.EXTEND_PRIOR)}


def priced(nxt, drafting=model_drafting, factor=1.0):
    def extension_pays(self, sure, base, drafted):
        top, stats = len(self.costs) - 1, self.stack[-1].stats
        rates = {True: G.sure_acceptance(stats), False: G.unsure_acceptance(stats)}
        passed = math.prod(rates[kind] for kind in sure[:drafted])
        row = self.costs[top](drafted + 2) - self.costs[top](drafted + 1)
        return drafting(self, top) + row < factor * self.predicted * passed * NEXT[nxt](self, stats)
    return extension_pays


def variant(name):
    if name == "measured":
        return priced("extacc", measured_drafting)
    return priced(name) if name in NEXT else priced("mean", factor=float(name))


variants = {name: variant(name) for name in names}
res = {v: [] for v in variants}; passes = {v: [] for v in variants}; ext = {v: [] for v in variants}
eng.generate(ids, run)
for r in range(R):
    for name, pays in variants.items():
        G.GammaTuner.extension_pays = pays
        st = eng.generate(ids, dataclasses.replace(run, seed=200 + r)).stats
        res[name].append(st["ms_per_token"]); passes[name].append(st["target_passes"]); ext[name].append(st["gamma"]["extension"]["tokens"])
    print(r, {v: (res[v][-1], passes[v][-1], ext[v][-1]) for v in variants}, flush=True)
for v in variants:
    print(f"{v}: median ms/token {statistics.median(res[v]):.3f} mean {statistics.mean(res[v]):.3f}, "
          f"target passes {statistics.mean(passes[v]):.1f}, extension tokens {statistics.mean(ext[v]):.1f}")
