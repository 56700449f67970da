"""The middle level's head, interleaved in one process: its int8 head (the default before round 47)
against the int4 RescoredHead (quant.RESCORED candidates per row get the dense head's exact logits).
Each request probes its own pass costs (--gamma auto; the engine's saved costs are cleared).
python headab.py S T NEW ROUNDS [K ...]   (K: candidates rescored per row, quant.RESCORED; default its value)
OFFSETS=0,100000,... (environment): prompts of S tokens from these character offsets of the essays, each
its own prefill (default: 0 only). GAMMA=G1,G2 (environment): fixed γ1, γ2 instead of --gamma auto."""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import quant
from triforce.runtime.quant import lower_level_copy

from triforce.runtime.bench.suites import corpus_text
S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
if os.environ.get("GAMMA"):
    g1, g2 = (int(g) for g in os.environ["GAMMA"].split(","))
    run = dataclasses.replace(run, gamma="fixed", gamma1=g1, gamma2=g2)
offsets = [int(o) for o in os.environ.get("OFFSETS", "0").split(",")]
prompts = [ids if o == 0 else eng.tokenizer.encode(corpus_text("essays")[o:o + 8 * S])[:S] for o in offsets]
eng.generate(ids, run)                                   # builds the default middle level
(key, rescored), = [(k, m) for k, m in eng._level_models.items() if k[0] == "middle"]
Ks = [int(k) for k in sys.argv[5:]] or [quant.RESCORED]
variants = {"int8 head": (lower_level_copy(eng.model, "int4", head="int8", dtype=key[3]), quant.RESCORED)}
variants.update({f"rescored int4 head, K = {k}": (rescored, k) for k in Ks})
print({name: (m.weights, type(m.lm_head).__name__) for name, (m, k) in variants.items()}, flush=True)
res = {v: [] for v in variants}; mid = {v: [] for v in variants}; passes = {v: [] for v in variants}
for r in range(R * len(prompts)):
    ids = prompts[r // R]
    for name, (model, k) in variants.items():
        eng._level_models[key], quant.RESCORED = model, k
        eng.pass_costs.clear()
        st = eng.generate(ids, dataclasses.replace(run, seed=100 + r)).stats
        res[name].append(st["ms_per_token"]); passes[name].append(st["target_passes"])
        lv = st["levels"]["retrieval"]
        mid[name].append(1000 * lv["seconds"] / max(1, lv["passes"]))
        print(r // R, r % R, name, st["ms_per_token"], "target passes", st["target_passes"], "middle ms/pass %.3f" % mid[name][-1],
              "middle acc", lv.get("acceptance"), "target acc", st["levels"]["target"].get("acceptance"),
              "choices", st.get("gamma", {}).get("rounds_per_choice"), "extension", st.get("gamma", {}).get("extension", {}).get("tokens"),
              "sure", st["levels"]["target"]["sure"], flush=True)
for v in variants:
    print(f"{v}: median ms/token {statistics.median(res[v]):.3f} (mean {statistics.mean(res[v]):.3f}), "
          f"middle ms/pass {statistics.median(mid[v]):.3f}, target passes {statistics.mean(passes[v]):.1f}")
