"""The target's T-token pass at S in a loop for SECONDS (a profiler attaches to it):
    python loop_pass.py S T SECONDS [bf16|fp32]"""
import sys
import time

import torch

from harness import target_level

S, T, secs = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
target, ids = target_level(S, sys.argv[4] if len(sys.argv) > 4 else "bf16")
n = target.cache.get_seq_length()
x = torch.tensor([ids[S - T + 1:S + 1]])
times = []
print("ready", flush=True)
with torch.inference_mode():
    end = time.time() + secs
    while time.time() < end:
        t0 = time.perf_counter(); target.model(x, target.cache); times.append(time.perf_counter() - t0)
        target.cache.crop(n)
times.sort()
print(f"passes {len(times)}: min {1000*times[0]:.2f} median {1000*times[len(times)//2]:.2f} ms", flush=True)
