"""The target's packed pass of B sequences (T tokens each, full caches of S random-KV tokens) against B
single passes and the roofline. python packed_pass.py S T REPS B..."""
import statistics, sys, time
import torch
from triforce.runtime.bench.passes import fill_full_cache
from triforce.runtime.bench.measure import pass_cost
from triforce.runtime.bench.measure import interleaved
from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_packed import PackedCache
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.probes import read_bandwidth_gbs
S, T, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
Bs = [int(b) for b in sys.argv[4:]]
torch.set_num_threads(2)
engine = Engine(RunConfig(mode="ar", dtype="bf16", rope_scaling="yarn:4" if S > 8000 else None))
model = engine.model
bw = read_bandwidth_gbs()
print(f"bandwidth {bw:.1f} GB/s", flush=True)
rope = model.rope(S + 64)
caches = []
for i in range(max(Bs)):
    c = FullCache(model.cfg, rope, 1, S + 64, engine.device, model.dtype)
    fill_full_cache(c, S, seed=i)
    caches.append(c)
x1 = torch.randint(0, 1000, (1, T))
def single(B):
    def f():
        t0 = time.perf_counter()
        for c in caches[:B]:
            model(x1, c, last_only=T)
            c.crop(S)
        return time.perf_counter() - t0
    return f
def packed(B):
    def f():
        pc = PackedCache(caches[:B], [T] * B)
        x = torch.randint(0, 1000, (1, B * T))
        rows = pc.rows([T] * B, x.device)
        t0 = time.perf_counter()
        model(x, pc, last_only=rows)
        dt = time.perf_counter() - t0
        for c in caches[:B]: c.crop(S)
        return dt
    return f
with torch.inference_mode():
    for B in Bs:
        r = interleaved({"single": single(B), "packed": packed(B)}, reps, warmup=2)
        wbytes, _ = pass_cost(model, 0, T)
        kvbytes = pass_cost(model, S, T)[0] - wbytes
        floor = (wbytes + B * kvbytes) / bw / 1e6
        s, p = statistics.median(r["single"]) * 1e3, statistics.median(r["packed"]) * 1e3
        print(f"B={B} T={T} S={S}: {B} single passes {s:.1f} ms, packed {p:.1f} ms, floor {floor:.1f} ms "
              f"(weights {wbytes/1e6:.0f} MB + {B} x KV {kvbytes/1e6:.0f} MB) -> packed {p/floor:.2f}x floor", flush=True)
