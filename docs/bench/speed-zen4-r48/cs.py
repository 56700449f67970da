import time, torch
torch.set_num_threads(2)
from triforce.runtime.cache_retrieval import chunk_scores
B, Hkv, S, D, G, chunk = 1, 3, 32000, 64, 3, 8
L = 30
keys = [torch.randn(B, Hkv, S + 200, D).to(torch.bfloat16)[:, :, :S] for _ in range(L)]
qs = [torch.randn(B, Hkv * G, D).to(torch.bfloat16) for _ in range(L)]
def blocked(keys, query, chunk, block=4096):
    B, Hkv, S, D = keys.shape
    q = query.float().view(B, Hkv, -1, D).sum(2)                       # [B, Hkv, D]
    out = []
    for s in range(0, S, block):
        kb = keys[:, :, s:s + block].float()                            # [B, Hkv, b, D]
        means = kb.view(B, Hkv, -1, chunk, D).mean(dim=3)
        out.append(torch.einsum("bhd,bhcd->bhc", q, means))
    return torch.cat(out, -1)
def viasum(keys, query, chunk):
    B, Hkv, S, D = keys.shape
    grouped = query.float().view(B, Hkv, -1, D)
    means = keys.view(B, Hkv, S // chunk, chunk, D).sum(dim=3, dtype=torch.float32) / chunk
    return torch.einsum("bhgd,bhcd->bhc", grouped, means)
def perkey(keys, query, chunk):   # per-key dots in fp32 via a blocked matmul, then chunk sums
    B, Hkv, S, D = keys.shape
    q = query.float().view(B, Hkv, -1, D).sum(2)
    out = []
    for s in range(0, S, 4096):
        kb = keys[:, :, s:s + 4096].float()
        out.append((kb @ q[..., None]).view(B, Hkv, -1, chunk).sum(-1) / chunk)
    return torch.cat(out, -1)
fns = dict(current=chunk_scores, blocked=blocked, viasum=viasum, perkey=perkey)
ref = [chunk_scores(k, q, chunk) for k, q in zip(keys, qs)]
for name, f in fns.items():
    got = [f(k, q, chunk) for k, q in zip(keys, qs)]
    err = max((a - b).abs().max().item() / b.abs().max().item() for a, b in zip(got, ref))
    same = sum(torch.equal(a.topk(270).indices.sort().values, b.topk(270).indices.sort().values) for a, b in zip(got, ref))
    print(name, "rel err", f"{err:.2e}", "same top-270 layers", same)
for rep in range(3):
    for name, f in fns.items():
        t = time.perf_counter()
        for k, q in zip(keys, qs):
            f(k, q, chunk)
        print(rep, name, f"{1e3 * (time.perf_counter() - t):.1f} ms / 30 layers", flush=True)
