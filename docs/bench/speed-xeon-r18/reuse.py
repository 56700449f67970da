# Round 18 (run from the repository root): one engine, --gamma auto, four requests of 128 tokens on
# the same 7K essay prompt (T = 0, then T = 0.6 with two seeds, then T = 0 again): the first probes
# the pass costs, the others take the costs the one before ended with (Engine.pass_costs).
#   python docs/bench/speed-xeon-r18/reuse.py 7168
import sys, json, torch
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.bench.measure import no_eos
from triforce.runtime.bench.suites import corpus_text
torch.set_num_threads(2)
S = int(sys.argv[1])
run = RunConfig(mode="triforce", dtype="bf16", gamma="auto", max_new_tokens=128, middle_weights="int4",
                draft_weights="int4", draft_vocab=4096, retrieval_budget=1024)
engine = Engine(run, keep_prefill=True)
ids = engine.tokenizer.encode(corpus_text("essays"))[:S]
with no_eos(engine), torch.inference_mode():
    for i, (t, seed) in enumerate([(0.0, 0), (0.6, 1), (0.6, 2), (0.0, 0)]):
        r = engine.generate(ids, RunConfig(**{**run.__dict__, "temperature": t, "seed": seed})).stats
        g = r["gamma"]
        print(json.dumps(dict(request=i, temperature=t, probe_reused=g["probe_reused"], probe_s=g["probe_s"],
                              own_prefill_s=r["prefill_s"], decode_s=r["decode_s"], ms_per_token=r["ms_per_token"],
                              past_target_prefill_s=round(g["probe_s"] + r["decode_s"], 3),
                              choices=dict(list(g["rounds_per_choice"].items())[:3]))), flush=True)
