"""Needs select_step.patch (this directory) applied: git apply docs/bench/speed-zen4-r49/select_step.patch.
A middle-level pass at S tokens on the retrieval cache as chosen once (chunks of 8) against one that
chooses per pass (select "step", chunks of 64), the same budget, T tokens, interleaved in one process:
median ms of REPEATS passes each (each step pass re-chooses against the queries of the pass before).
python stepcost.py S BUDGET REPEATS T..."""
import os, sys, time, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r48"))
from forcing import from_argv, prompts
import dataclasses, torch
from triforce.runtime.bench.lower import middle_level

S, budget, repeats, Ts = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), [int(t) for t in sys.argv[4:]]
sys.argv[2] = "16"
_, _, engine, run, models = from_argv()
model = models["int4"]
with torch.inference_mode():
    off, ids = next(prompts(engine, S, "0"))
    request = dataclasses.replace(run, max_new_tokens=64)
    stack, _ = engine.build_stack(request, len(ids) + 64)
    engine.prefill(stack, ids, None)
    target = stack[-1]
    ctx = len(ids) - 1
    r = dataclasses.replace(request, retrieval_budget=budget, retrieval_recent=256, chunk_size=8)
    t0 = time.perf_counter(); static = middle_level(engine, r, model, target, ctx, len(ids) + 64).cache; a = time.perf_counter() - t0
    r = dataclasses.replace(r, chunk_size=64, retrieval_select="step")
    t0 = time.perf_counter(); chosen = middle_level(engine, r, model, target, ctx, len(ids) + 64).cache; b = time.perf_counter() - t0
    assert chosen.choice is not None
    print(f"S {S} budget {budget}: fill static {a * 1e3:.1f} ms, step {b * 1e3:.1f} ms", flush=True)
    tok = torch.tensor([ids[-64:]])
    for T in Ts:
        times = {"static": [], "step": []}
        for _ in range(repeats):
            for name, cache in (("static", static), ("step", chosen)):
                cache.crop(ctx)
                i = len(times[name]) % 8 * T   # other tokens each pass: the step cache's choice moves
                t0 = time.perf_counter(); model.forward(tok[:, i:i + T], cache, last_only=T); times[name].append(time.perf_counter() - t0)
        a, b = (statistics.median(times[k]) * 1e3 for k in ("static", "step"))
        print(f"T {T}: static {a:.2f} ms, step {b:.2f} ms ({b / a:.3f}x)", flush=True)
    from triforce.runtime.model import decoder_plan
    plan = decoder_plan(model)
    for name, cache in (("static", static), ("step", chosen)):
        plan.set_timing(True)
        for j in range(20):
            cache.crop(ctx)
            model.forward(tok[:, j % 8 * 4:j % 8 * 4 + 4], cache, last_only=4)
        print(name, "T 4 stages (ms a pass):", {k: round(v * 1e3, 3) for k, v in plan.stage_seconds()})
        plan.set_timing(False)
