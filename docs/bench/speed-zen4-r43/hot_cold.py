"""Attention with K/V hot (2,048 keys, L2) and cold (32K keys, 12 buffers rotated), T = 1..4: ns per key and KV head
per thread. usage: python hot_cold.py THREADS"""
import sys, time, statistics, itertools, torch
from triforce.runtime.native import attention_cpu
th = int(sys.argv[1]) if len(sys.argv) > 1 else 2
torch.set_num_threads(th)
k_ = attention_cpu()
B,H,Hkv,D,dt = 1,9,3,64,torch.bfloat16
def med(fn, n=15):
    ts=[]
    for _ in range(n):
        t=time.perf_counter(); fn(); ts.append(time.perf_counter()-t)
    return statistics.median(ts)
for T in (1,2,3,4):
    q = torch.randn(B,H,T,D,dtype=dt)
    # hot: 1024 keys, 30 calls on the same buffer
    S=2048; kh=torch.randn(B,Hkv,S,D,dtype=dt); vh=torch.randn(B,Hkv,S,D,dtype=dt)
    hot = med(lambda: [k_.attend(q,kh,vh,D**-0.5) for _ in range(30)])/30
    S2=32768
    bufs=[(torch.randn(B,Hkv,S2,D,dtype=dt),torch.randn(B,Hkv,S2,D,dtype=dt)) for _ in range(12)]
    rot=itertools.cycle(bufs)
    def cold_call():
        kc,vc=next(rot); k_.attend(q,kc,vc,D**-0.5)
    cold = med(cold_call, 24)
    nb_hot = 2*Hkv*S*D*2; nb_cold=2*Hkv*S2*D*2
    print(f"threads={th} T={T}: hot {hot*1e6:7.1f} us / {S} keys -> {nb_hot/hot/1e9:5.1f} GB/s-equivalent, "
          f"{hot/S*1e9/Hkv*th:6.2f} ns/key-head/thread; cold 32K {cold*1e3:6.3f} ms -> {nb_cold/cold/1e9:5.1f} GB/s, "
          f"{cold/S2*1e9/Hkv*th:6.2f} ns/key-head/thread")
