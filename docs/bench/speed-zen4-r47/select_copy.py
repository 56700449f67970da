"""The retrieval cache's selection copy and chunk scores, alternatives timed per layer (python select_copy.py):
g1 gather over expanded indices (before), g2 advanced indexing, g3 index_select per KV head (now); s1 the chunk
means in fp32 (now), s2 a bf16 matmul first, s3-s5 other orders."""
import torch, time, statistics
torch.set_num_threads(2)
for S in (7000, 32000):
    keys = torch.randn(1, 3, S, 64).bfloat16()
    kept = 1024 if S == 7000 else 2192
    pos = torch.sort(torch.randperm(S)[:kept].view(1, 1, kept).expand(1, 3, kept).contiguous(), -1).values
    out = torch.empty(1, 3, kept, 64).bfloat16()
    b = torch.arange(1)[:, None, None]; h = torch.arange(3)[None, :, None]
    def g1(): out[:] = keys.gather(2, pos[..., None].expand(-1, -1, -1, 64))
    def g2(): out[:] = keys[b, h, pos]
    def g3():
        for hh in range(3): torch.index_select(keys[0, hh], 0, pos[0, hh], out=out[0, hh])
    q = torch.randn(1, 9, 64).bfloat16()
    def s1(): return torch.einsum("bhgd,bhcd->bhc", q.float().view(1, 3, 3, 64), keys.float().view(1, 3, S // 8, 8, 64).mean(dim=3))
    def s2(): return torch.matmul(q.view(1, 3, 3, 64), keys.transpose(-1, -2)).float().sum(2).view(1, 3, S // 8, 8).mean(-1)
    def s3(): return torch.matmul(keys.view(1, 3, S // 8, 8 * 64).float().view(1,3,S//8,8,64).sum(3), q.float().view(1,3,3,64).transpose(-1,-2)).sum(-1) / 8
    for f in (g1, g2, g3, s1, s2, s3):
        ts = []
        for _ in range(20):
            t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        print(S, f.__name__, f"{statistics.median(ts) * 1e3:.3f} ms")
    a, c = s1(), s2(); print("s2 vs s1 max rel", ((a - c).abs().max() / a.abs().max()).item())
for S in (7000, 32000):
    keys = torch.randn(1, 3, S, 64).bfloat16(); q = torch.randn(1, 9, 64).bfloat16()
    C = S // 8
    def s1(): return torch.einsum("bhgd,bhcd->bhc", q.float().view(1, 3, 3, 64), keys.float().view(1, 3, C, 8, 64).mean(dim=3))
    def s4(): return torch.einsum("bhgd,bhcd->bhc", q.float().view(1, 3, 3, 64), keys.view(1, 3, C, 8, 64).sum(3, dtype=torch.float32)) / 8
    def s5():
        m = keys.view(1, 3, C, 8, 64).sum(3, dtype=torch.float32)    # [B, Hkv, C, D]
        return torch.matmul(m, q.float().view(1, 3, 3, 64).sum(2, keepdim=True).transpose(-1, -2)).squeeze(-1) / 8
    for f in (s1, s4, s5):
        ts = []
        for _ in range(20):
            t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
        print(S, f.__name__, f"{statistics.median(ts) * 1e3:.3f} ms")
    a = s1()
    for f in (s4, s5): print(f.__name__, "vs s1 max rel", ((a - f()).abs().max() / a.abs().max()).item())
