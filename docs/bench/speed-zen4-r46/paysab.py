"""How strict should extension's pricing be? GammaTuner.extension_pays against a rate scaled by each
factor (1 = the runtime: the current choice's predicted seconds per token; < 1 extends less), or ("sure") with
the next token priced at the acceptance of sure drafts, or ("measured") with the run's own drafting seconds
per token and extension tokens' acceptance, or ("extacc") with that acceptance alone, interleaved in one process, a text per round at T > 0.
python paysab.py S T NEW ROUNDS FACTOR|sure [FACTOR|sure ...]"""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import gamma as G

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
factors = [f if f in ("sure", "measured", "extacc") else float(f) for f in sys.argv[5:]]
args, eng, run, ids = triforce_request(S, T, NEW)
pays = G.GammaTuner.extension_pays


def scaled(f):
    def extension_pays(self, sure, base, drafted):
        kept = self.predicted
        self.predicted = kept * f
        try:
            return pays(self, sure, base, drafted)
        finally:
            self.predicted = kept
    return extension_pays


def next_sure(self, sure, base, drafted):
    """The runtime's rule, but the next token passing at the acceptance of sure drafts (it follows a sure
    one, and sure drafts come in runs) instead of the target's mean per-token acceptance."""
    top, alphas, stats = len(self.costs) - 1, self.alphas(), self.stack[-1].stats
    rates = {True: G.sure_acceptance(stats), False: G.unsure_acceptance(stats)}
    passed = 1.0
    for kind in sure[:drafted]:
        passed *= rates[kind]
    drafting = G.draft_seconds(self.costs, alphas, tuple(self.gammas), top - 1, G.EXTEND_UNIT) / G.EXTEND_UNIT
    row = self.costs[top](drafted + 2) - self.costs[top](drafted + 1)
    return drafting + row < self.predicted * passed * rates[True]


def measured(self, sure, base, drafted):
    """The runtime's rule with the run's own figures: drafting priced at the lower levels' seconds per token
    they proposed to the target so far (the model's figure before EXPLORE_TOKENS), the next token at the
    acceptance extension tokens have had (smoothed towards EXTEND_PRIOR)."""
    top, alphas, stats = len(self.costs) - 1, self.alphas(), self.stack[-1].stats
    rates = {True: G.sure_acceptance(stats), False: G.unsure_acceptance(stats)}
    passed = 1.0
    for kind in sure[:drafted]:
        passed *= rates[kind]
    if stats.drafted >= G.EXPLORE_TOKENS:
        drafting = sum(lv.stats.seconds for lv in self.stack[:-1]) / stats.drafted
    else:
        drafting = G.draft_seconds(self.costs, alphas, tuple(self.gammas), top - 1, G.EXTEND_UNIT) / G.EXTEND_UNIT
    row = self.costs[top](drafted + 2) - self.costs[top](drafted + 1)
    nxt = G.smoothed_acceptance(stats.extended_accepted, stats.extended_rejections, G.EXTEND_PRIOR)
    return drafting + row < self.predicted * passed * nxt


def extacc(self, sure, base, drafted):
    """The runtime's rule, but the next token passing at the acceptance extension tokens have had
    (smoothed towards EXTEND_PRIOR) instead of the target's mean per-token acceptance."""
    top, alphas, stats = len(self.costs) - 1, self.alphas(), self.stack[-1].stats
    rates = {True: G.sure_acceptance(stats), False: G.unsure_acceptance(stats)}
    passed = 1.0
    for kind in sure[:drafted]:
        passed *= rates[kind]
    drafting = G.draft_seconds(self.costs, alphas, tuple(self.gammas), top - 1, G.EXTEND_UNIT) / G.EXTEND_UNIT
    row = self.costs[top](drafted + 2) - self.costs[top](drafted + 1)
    nxt = G.smoothed_acceptance(stats.extended_accepted, stats.extended_rejections, G.EXTEND_PRIOR)
    return drafting + row < self.predicted * passed * nxt


res = {f: [] for f in factors}; passes = {f: [] for f in factors}; ext = {f: [] for f in factors}
eng.generate(ids, run)
for r in range(R):
    for f in factors:
        G.GammaTuner.extension_pays = {"sure": next_sure, "measured": measured, "extacc": extacc}.get(f) or scaled(f)
        st = eng.generate(ids, dataclasses.replace(run, seed=200 + r)).stats
        res[f].append(st["ms_per_token"]); passes[f].append(st["target_passes"]); ext[f].append(st["gamma"]["extension"]["tokens"])
    print(r, {f: (res[f][-1], passes[f][-1], ext[f][-1]) for f in factors}, flush=True)
for f in factors:
    print(f"factor {f}: median ms/token {statistics.median(res[f]):.3f} mean {statistics.mean(res[f]):.3f}, "
          f"target passes {statistics.mean(passes[f]):.1f}, extension tokens {statistics.mean(ext[f]):.1f}")
