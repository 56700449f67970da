"""Attention calls on two checkouts, one worker process each, the driver alternating calls between
them (never both at once, order swapped every repetition). A checkout is given as a directory put
first on sys.path that holds triforce/{runtime,actors,offload} (links into a git worktree: its own
sources and native build), or "-" for the installed one:
python ab_builds.py REPS T,T,.. S,S,.. OLD NEW"""
import multiprocessing as mp, os, statistics, sys, time

def worker(shim, conn):
    import sys
    if shim != "-":
        sys.path.insert(0, shim)
    import torch
    torch.set_num_threads(2)
    from triforce.runtime.native import attention_cpu
    k = attention_cpu()
    conn.send(k.__file__)
    cache = {}
    while True:
        msg = conn.recv()
        if msg is None: return
        S, T, calls = msg
        if (S, T) not in cache:
            g = torch.Generator().manual_seed(S * 1000 + T)
            kc, vc = (torch.randn(1, 3, S, 64, generator=g).bfloat16() for _ in range(2))
            cache = {(S, T): (torch.randn(1, 9, T, 64, generator=g).bfloat16() * 2, kc, vc)}
        q, kc, vc = cache[(S, T)]
        for _ in range(calls):
            t0 = time.perf_counter(); o = k.attend(q, kc, vc, 0.125); t = time.perf_counter() - t0
        conn.send((t, o.float().sum().item(), o.float().pow(2).sum().item()))

if __name__ == "__main__":
    reps, Ts, Ss, dirs = int(sys.argv[1]), [int(t) for t in sys.argv[2].split(",")], [int(s) for s in sys.argv[3].split(",")], sys.argv[4:6]
    ctx = mp.get_context("spawn")
    pipes = []
    for d in dirs:
        a, b = ctx.Pipe(); p = ctx.Process(target=worker, args=(d, b)); p.start(); pipes.append(a)
        print("worker", d, "->", a.recv(), flush=True)
    for S in Ss:
        for T in Ts:
            ts, outs = [[], []], [None, None]
            for r in range(reps):
                for i in ((0, 1) if r % 2 == 0 else (1, 0)):
                    pipes[i].send((S, T, 3 if T <= 32 else 1)); t, s, head = pipes[i].recv(); ts[i].append(t); outs[i] = (s, head)
            a, b = statistics.median(ts[0]), statistics.median(ts[1])
            print(f"S={S:>6} T={T:>4}: old {a*1e3:8.3f} ms  new {b*1e3:8.3f} ms  new/old {b/a:.3f}  same bits {outs[0] == outs[1]}", flush=True)
    for p in pipes: p.send(None)
