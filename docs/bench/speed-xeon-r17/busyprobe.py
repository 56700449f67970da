# --gamma auto when the start-up probe saw the lower levels 4x dearer than they are (a machine busy
# during the probe only): with and without the tuner's rescaling by the run's own passes.
import sys, json, statistics
import torch
from triforce.runtime import gamma
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.assets import essays_text
torch.set_num_threads(2)
real = gamma.probe_pass_costs
def busy(stack, caps):
    costs = real(stack, caps)
    return [gamma.PassCost(tuple((T, s * 4) for T, s in c.points)) if i < 2 else c for i, c in enumerate(costs)]
gamma.probe_pass_costs = busy
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=128, retrieval_budget=1024, middle_weights="int4",
                draft_weights="int4", draft_vocab=4096, gamma="auto")
engine = Engine(run, keep_prefill=True)
ids = engine.tokenizer.encode(essays_text()[:7168 * 8])[:7168]
ar = dict(mode="ar", gamma="fixed")
rows = {}
for rep in range(3):
    for name, refresh in (("probe only", 10 ** 9), ("rescaled", 8)):
        gamma.REFRESH_ROUNDS = refresh
        r = engine.generate(ids, run)
        rows.setdefault(name, []).append((r.stats["ms_per_token"], r.stats["gamma"]["rounds_per_choice"], r.stats["tokens_per_target_pass"]))
    import dataclasses
    r = engine.generate(ids, dataclasses.replace(run, mode="ar"))
    rows.setdefault("ar", []).append((r.stats["ms_per_token"], None, 1))
for name, v in rows.items():
    print(f"{name:10s} ms/token {[x[0] for x in v]} median {statistics.median(x[0] for x in v):.1f}; choices {v[-1][1]}")
