"""Why the compiled glue ops were slow in call 1: each op's first compile (errors shown), then one
7B-shaped op's cost per call on CUDA, eager against compiled, called in a loop and replayed from a graph."""
import time
import traceback

import torch

from triforce.runtime import ops

x = torch.randn(1, 1, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
q = torch.randn(1, 32, 1, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)
cs = torch.randn(1, 1, 128, device="cuda", dtype=torch.bfloat16)
g = torch.randn(1, 1, 11008, device="cuda", dtype=torch.bfloat16)
cases = dict(rms_norm=(ops._rms_norm_torch, (x, w, 1e-5)), rope=(ops._rope_torch, (q, cs, cs)),
             silu_mul=(ops._silu_mul_torch, (g, g)))
for name, (twin, args) in cases.items():
    compiled = torch.compile(twin, dynamic=None, fullgraph=True)
    try:
        t0 = time.perf_counter(); compiled(*args); torch.cuda.synchronize()
        print(f"{name}: first compiled call {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception:
        print(f"{name}: compile failed\n{traceback.format_exc()[-3000:]}", flush=True)
        continue
    for label, fn in (("eager", twin), ("compiled", compiled)):
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(200):
            fn(*args)
        torch.cuda.synchronize(); loop = (time.perf_counter() - t0) / 200 * 1e6
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn(*args)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(100):
                fn(*args)
        graph.replay(); torch.cuda.synchronize(); t0 = time.perf_counter()
        for _ in range(10):
            graph.replay()
        torch.cuda.synchronize(); replay = (time.perf_counter() - t0) / 1000 * 1e6
        print(f"{name} {label}: {loop:.1f} us a call in a loop, {replay:.2f} us a call replayed", flush=True)
