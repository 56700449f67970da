# Round 39: one level's T-token pass, built as the passes suite builds it (bench/passes.py
# built_levels), timed and taken apart. Usage: [MODE=1 ...] python level_profile.py S LEVEL [T]
#   (LEVEL: target | retrieval | drafter). With no mode: the median of 30 passes and torch.profiler's table.
#   LOOP=SECONDS   passes in a loop (for perf record -D), with Python's GC collections counted
#   GCTEST=1       passes with the GC on and frozen
#   PARTS=1        each linear of layer 0, attention and the head timed alone (hot)
#   THREADS=1      the pass at 2 and 1 threads, alternated
#   SPLIT/SPLIT2/SPLIT3=1  the pass against DecoderPlan.run and the head alone, 2 and 1 threads
#   LT=THREADS [LTV=NAME]  per-stage rdtsc timers: layer_cpu.cpp + layer_timers.patch built as NAME
#                  (attention_variants.py build NAME, VARDIR) and swapped in for the plan
#   QVAR=A,B,...   quant_cpu.cpp variants (built likewise) swapped into the plan, alternated
#   CPROF=1        cProfile of 50 passes
import os, sys, argparse, torch, time, statistics
from triforce.runtime.bench import passes as P
from triforce.runtime.bench.suites import base_run
from triforce.runtime.engine import Engine
import argparse
from triforce.runtime.bench import add_bench_parser
S = int(sys.argv[1]); name = sys.argv[2]; T = int(sys.argv[3]) if len(sys.argv) > 3 else 1
torch.set_num_threads(2)
parser = argparse.ArgumentParser(); sub = parser.add_subparsers(dest="command"); add_bench_parser(sub)
args = parser.parse_args(["bench", "--suite", "passes", "--dtypes", "bf16", "--threads", "2", "--contexts", str(S), "--corpus", "essays"] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
with torch.inference_mode():
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    ids = P.prompt_ids(engine, args, S + 2)
    levels = P.built_levels(engine, run, ids, S)
    level = levels[name]
    x = torch.tensor([ids[S - T + 1:S + 1]])
    n = level.cache.get_seq_length()
    for _ in range(5): level.model(x, level.cache); level.cache.crop(n)
    ts = []
    for _ in range(30):
        t = time.perf_counter(); level.model(x, level.cache); ts.append(time.perf_counter() - t); level.cache.crop(n)
    print(f"{name} S={S} T={T}: median {statistics.median(ts)*1e3:.2f} ms, min {min(ts)*1e3:.2f}")
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20): level.model(x, level.cache); level.cache.crop(n)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    import os
    if os.environ.get("LOOP"):
        import gc
        gcs = [0, 0.0, [0, 0, 0]]; st = {}
        def cb(phase, info):
            if phase == "start": st["t"] = time.perf_counter()
            else: gcs[0] += 1; gcs[1] += time.perf_counter() - st["t"]; gcs[2][info["generation"]] += 1
        gc.callbacks.append(cb)
        print("LOOP START", time.time(), flush=True)
        t0 = time.time(); c = 0
        while time.time() - t0 < float(os.environ["LOOP"]):
            level.model(x, level.cache); level.cache.crop(n); c += 1
        print("LOOP", c, (time.time() - t0) / c * 1e3, "ms/pass", "gc", gcs, flush=True)
    if os.environ.get("GCTEST"):
        import gc
        stats = {0: [0, 0.0], 1: [0, 0.0], 2: [0, 0.0]}; start = {}
        def cb(phase, info):
            if phase == "start": start["t"] = time.perf_counter()
            else: s = stats[info["generation"]]; s[0] += 1; s[1] += time.perf_counter() - start["t"]
        gc.callbacks.append(cb)
        print("tracked objects", len(gc.get_objects()), "thresholds", gc.get_threshold(), flush=True)
        for mode in ("on", "frozen", "on", "frozen"):
            if mode == "frozen": gc.freeze()
            else: gc.unfreeze()
            for s in stats.values(): s[0] = 0; s[1] = 0.0
            ts = []
            for _ in range(100):
                t = time.perf_counter(); level.model(x, level.cache); ts.append(time.perf_counter() - t); level.cache.crop(n)
            print(mode, f"median {statistics.median(ts)*1e3:.2f} ms mean {statistics.mean(ts)*1e3:.2f}", {g: (c, round(t * 1e3, 1)) for g, (c, t) in stats.items()}, flush=True)
    if os.environ.get("CPROF"):
        import cProfile, pstats
        pr = cProfile.Profile(); pr.enable()
        for _ in range(50): level.model(x, level.cache); level.cache.crop(n)
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(30)
    if os.environ.get("PARTS"):
        from triforce.runtime import native
        att = native.attention_cpu()
        m = level.model
        E = m.cfg.hidden_size
        xr = torch.randn(1, 1, E).bfloat16()
        def tm(f, reps=200):
            for _ in range(10): f()
            ts = []
            for _ in range(reps):
                t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
            return statistics.median(ts) * 1e3
        L0 = m.model.layers[0]
        parts = {}
        parts["qkv"] = tm(lambda: L0.self_attn.qkv_proj(xr))
        parts["o"] = tm(lambda: L0.self_attn.o_proj(xr))
        parts["gate_up"] = tm(lambda: L0.mlp.gate_up_proj(xr))
        xf = torch.randn(1, 1, m.cfg.intermediate_size).bfloat16()
        parts["down"] = tm(lambda: L0.mlp.down_proj(xf))
        kv = level.cache.get_seq_length()
        q = torch.randn(1, 9, T, 64).bfloat16(); K = torch.randn(1, 3, kv, 64).bfloat16(); V = torch.randn(1, 3, kv, 64).bfloat16()
        parts["attend"] = tm(lambda: att.attend(q, K, V, 0.125, None))
        parts["head"] = tm(lambda: m.lm_head(xr))
        per_layer = sum(v for k, v in parts.items() if k != "head")
        print({k: round(v, 4) for k, v in parts.items()}, f"30 layers {30 * per_layer:.2f} ms + head {parts['head']:.2f} = {30 * per_layer + parts['head']:.2f} ms; kv {kv}")
        full = tm(lambda: (level.model(x, level.cache), level.cache.crop(n)), 50)
        print(f"whole pass {full:.2f} ms")
    if os.environ.get("THREADS"):
        for th in (2, 1, 2, 1):
            torch.set_num_threads(th)
            ts = []
            for _ in range(60):
                t = time.perf_counter(); level.model(x, level.cache); ts.append(time.perf_counter() - t); level.cache.crop(n)
            print(f"threads {th}: median {statistics.median(ts)*1e3:.2f} ms", flush=True)
    if os.environ.get("SPLIT"):
        from triforce.runtime.model import decoder_plan
        m = level.model
        plan = decoder_plan(m)
        print("plan", plan is not None)
        xr = torch.randn(1, 1, m.cfg.hidden_size).bfloat16()
        def run_plan():
            cos, sin = level.cache.begin(1)
            xx = m.model.embed_tokens(x)
            slots = level.cache.slots()
            y = plan.run(xx, cos, sin, *slots)
            level.cache.end(); level.cache.crop(n)
            return y
        def run_head():
            return m.head(xr, 1)
        for th in (2, 1, 2, 1):
            torch.set_num_threads(th)
            res = {}
            for nm, f in (("plan", run_plan), ("head", run_head)):
                for _ in range(5): f()
                ts = []
                for _ in range(60):
                    t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
                res[nm] = statistics.median(ts) * 1e3
            print(f"threads {th}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in res.items()), flush=True)
    if os.environ.get("SPLIT2"):
        from triforce.runtime.model import decoder_plan
        m = level.model
        plan = decoder_plan(m)
        def full():
            y = m(x, level.cache); level.cache.crop(n); return y
        def logits_only():
            y = m.logits(x, level.cache); level.cache.crop(n); return y
        def pieces():
            cos, sin = level.cache.begin(1)
            xx = m.model.embed_tokens(x)
            y = plan.run(xx, cos, sin, *level.cache.slots())
            level.cache.end()
            out = m.head(y, False)
            level.cache.crop(n)
            return out
        torch.set_num_threads(2)
        for rnd in range(3):
            res = {}
            for nm, f in (("full", full), ("logits", logits_only), ("pieces", pieces)):
                for _ in range(3): f()
                ts = []
                for _ in range(40):
                    t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
                res[nm] = statistics.median(ts) * 1e3
            print(", ".join(f"{k} {v:.2f} ms" for k, v in res.items()), flush=True)
    if os.environ.get("LT"):
        import glob, importlib.util
        from triforce.runtime import native, model as M
        V = os.environ.get("LTV", "lt"); so = glob.glob(os.environ.get("VARDIR", "/tmp/r39/var") + f"/b_{V}/{V}*.so")[0]
        spec = importlib.util.spec_from_file_location(V, so); lt = importlib.util.module_from_spec(spec); spec.loader.exec_module(lt)
        native.layer_cpu = lambda: lt
        M._PLANS.clear()
        m = level.model
        assert M.decoder_plan(m) is not None
        torch.set_num_threads(int(os.environ.get("LT")))
        for _ in range(5): m(x, level.cache); level.cache.crop(n)
        lt.timers(True)
        reps = 100; t0 = time.perf_counter()
        for _ in range(reps): m(x, level.cache); level.cache.crop(n)
        dt = (time.perf_counter() - t0) / reps
        t = lt.timers(True)
        names = ["norm1", "qkv", "attention", "o", "norm2", "gate_up", "silu", "down"]
        per = [v / reps / 2.445e6 for v in t[:8]]
        print(f"threads {os.environ['LT']}: pass {dt*1e3:.2f} ms; in layers {sum(per):.2f} ms: " + ", ".join(f"{k} {v:.3f}" for k, v in zip(names, per)), flush=True)
        if hasattr(lt, "qkvc"):   # layer_timers.patch + the K/V write timed apart (qkv_into_cache: RoPE, the cache's slots)
            lt.qkvc(True)
            for _ in range(reps): m(x, level.cache); level.cache.crop(n)
            print(f"  of attention: qkv_into_cache {lt.qkvc(True) / reps / 2.445e6:.3f} ms per pass", flush=True)
    if os.environ.get("QVAR"):
        import glob, importlib.util
        from triforce.runtime import native, model as M
        m = level.model
        plans = {}
        for V in os.environ["QVAR"].split(","):
            so = glob.glob(os.environ.get("VARDIR", "/tmp/r39/var") + f"/b_{V}/{V}*.so")[0]
            spec = importlib.util.spec_from_file_location(V, so); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
            native.quant_cpu = (lambda mm: (lambda: mm))(mod)
            M._PLANS.clear(); plans[V] = M.decoder_plan(m); assert plans[V] is not None
        torch.set_num_threads(2)
        res = {V: [] for V in plans}
        for rnd in range(12):
            for V, p in plans.items():
                M._PLANS[m] = p
                for _ in range(3): m(x, level.cache); level.cache.crop(n)
                ts = []
                for _ in range(20):
                    t = time.perf_counter(); m(x, level.cache); ts.append(time.perf_counter() - t); level.cache.crop(n)
                res[V].append(statistics.median(ts) * 1e3)
        for V, r in res.items():
            print(f"{V}: median of round medians {statistics.median(r):.2f} ms, rounds " + " ".join(f"{v:.2f}" for v in r), flush=True)
