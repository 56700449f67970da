"""The drafter's window prefill at a request's start (16 sinks + two passes of 120), int4 (the auto kind) against
its bf16 weights, 7K essays prompt: python drafter_window.py"""
import os, sys, time, statistics, dataclasses, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
args, eng, run, ids = triforce_request(7000, 0.0, 16)
r = eng.lower_levels(run)
print("lower levels:", r.middle_weights, r.draft_weights, r.draft_vocab)
d4 = eng.level_model(r, "drafter")
dsame = eng.level_model(dataclasses.replace(r, draft_weights="same", draft_vocab=0), "drafter")
print("drafter cfg: layers", d4.cfg.num_layers, "hidden", d4.cfg.hidden_size, "ffn", d4.cfg.intermediate_size)
from triforce.runtime.modes import mode_levels, make_cache
spec = mode_levels(r, 8000)[0][0]
for name, m in (("int4", d4), ("same (bf16)", dsame)):
    ts = []
    for i in range(8):
        c = make_cache(spec.cache, m.cfg, m.rope(spec.cache.positions), m.device, m.dtype)
        t0 = time.perf_counter()
        with torch.inference_mode():
            m(torch.tensor([ids[:16]]), c); m(torch.tensor([ids[16:136]]), c); m(torch.tensor([ids[136:256]]), c, last_only=True)
        ts.append(time.perf_counter() - t0)
    print(name, f"window prefill (16 + 120 + 120 tokens) {1000 * statistics.median(ts):.1f} ms")
