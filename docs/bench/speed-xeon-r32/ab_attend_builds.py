"""Decode/verify and prefill attention: the same calls on two builds of attention_cpu loaded in one
process (build/native_before vs build/native), interleaved per call; median ms and ratio."""
import importlib.machinery, importlib.util, statistics, sys, time
import torch
torch.set_num_threads(2)
def load(d):
    path = f"{d}/attention_cpu_native/triforce_attention_cpu_native.so"
    loader = importlib.machinery.ExtensionFileLoader("triforce_attention_cpu_native", path)
    spec = importlib.util.spec_from_file_location("triforce_attention_cpu_native", path, loader=loader)
    m = importlib.util.module_from_spec(spec); loader.exec_module(m); return m
import torch.utils.cpp_extension  # noqa (torch symbols loaded)
old, new = load("build/native_before"), load("build/native")
reps = int(sys.argv[1]); Ts = [int(t) for t in sys.argv[2].split(",")]; Ss = [int(s) for s in sys.argv[3].split(",")]
torch.manual_seed(0)
H, Hkv, D, dt = 9, 3, 64, torch.bfloat16
for S in Ss:
    kc, vc = torch.randn(1, Hkv, S, D, dtype=dt), torch.randn(1, Hkv, S, D, dtype=dt)
    for T in Ts:
        q = torch.randn(1, H, T, D, dtype=dt) * 2
        ts = {"old": [], "new": []}
        for _ in range(reps):
            for name, mod in ((("old", old), ("new", new)) if _ % 2 else (("new", new), ("old", old))):
                for _ in range(3 if T <= 32 else 1):
                    t0 = time.perf_counter(); o = mod.attend(q, kc, vc, D ** -0.5, None); dt_ = time.perf_counter() - t0
                ts[name].append(dt_)
        a, b = statistics.median(ts["old"]), statistics.median(ts["new"])
        print(f"S={S:>6} T={T:>4}: old {a*1e3:8.3f} ms  new {b*1e3:8.3f} ms  new/old {b/a:.3f}", flush=True)
