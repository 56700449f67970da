"""head_cert.py's bound with the k largest hidden channels (by their mean |x| over 1,024 calibration rows) multiplied
exactly in fp32 and the rest in int8, on the next 1,024 rows; then the channels permuted into their own int8 groups
instead. python head_outliers.py"""
import sys, torch, transformers
from triforce.runtime.assets import default_model_dir
from triforce.runtime.bench.suites import corpus_text
N = 2048
d = default_model_dir()
tok = transformers.AutoTokenizer.from_pretrained(str(d))
model = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
ids = tok.encode(corpus_text("essays")[:8 * N])[:N]
with torch.inference_mode():
    h = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0].bfloat16().float()
m = h.abs().amax(0)
print("top channel maxima", m.sort(descending=True).values[:16].tolist())
print("median channel max", m.median().item(), "norm weight top", model.model.norm.weight.abs().sort(descending=True).values[:8].tolist())
print("per-row |h| top-5 shares", (h.abs().sort(1, descending=True).values[:, :5] ** 2).sum(1).div(h.square().sum(1)).median().item())
W = model.lm_head.weight.detach().bfloat16().float()
exact = (h @ W.T).bfloat16().float()
cal, test = slice(0, 1024), slice(1024, N)
order = h[cal].abs().mean(0).argsort(descending=True)
for k in (0, 4, 8, 16, 32):
    out = order[:k]
    rest = torch.ones(h.shape[1], dtype=torch.bool); rest[out] = False
    Wr = W * rest
    sw = Wr.abs().amax(1, keepdim=True) / 127
    W8 = (Wr / sw).round().clamp(-127, 127) * sw
    hr = h[test] * rest
    g = hr.view(hr.shape[0], -1, 32)
    sx = g.abs().amax(-1, keepdim=True).clamp_min(1e-30) / 127
    h8 = ((g / sx).round() * sx).view(hr.shape[0], -1)
    approx = h8 @ W8.T + h[test][:, out] @ W[:, out].T
    e, a = (Wr - W8).norm(dim=1), W8.norm(dim=1)
    hn, dn = hr.norm(dim=1, keepdim=True), (0.5001 * sx).square().mul(32).sum((1, 2)).sqrt()[:, None]
    eps = hn * e + dn * a + 1e-4 * (h[test].norm(dim=1, keepdim=True) + dn) * a.max()
    true_err = (approx - h[test] @ W.T).abs()
    assert (true_err <= eps).all()
    floor = (approx - eps).amax(1, keepdim=True)
    margin = torch.exp2(torch.floor(torch.log2((approx + eps).abs().amax(1, keepdim=True))) - 7)
    cand = approx + eps >= floor - margin
    n = cand.sum(1).float()
    ok = (exact[test].argmax(1) == torch.where(cand, exact[test], -1e30).argmax(1)).float().mean()
    print(f"k={k:2d} exact channels: bound median {eps.median():.3f}; candidates median {n.median():.0f} mean {n.mean():.0f} p90 {n.quantile(.9):.0f} p99 {n.quantile(.99):.0f} max {n.max():.0f}; ok {ok:.4f}")
print("--- permuted: the k largest channels first, every group int8; bound with per-group-block norms")
for k in (32, 64):
    perm = torch.cat([order, ])  # channels by calibration magnitude, largest first
    hp, Wp = h[test][:, perm], W[:, perm]
    sw = Wp.abs().amax(1, keepdim=True) / 127
    W8 = (Wp / sw).round().clamp(-127, 127) * sw
    g = hp.view(hp.shape[0], -1, 32)
    sx = g.abs().amax(-1, keepdim=True) / 127
    h8 = ((g / sx).round() * sx).view(hp.shape[0], -1)
    approx = h8 @ W8.T
    e = (Wp - W8).norm(dim=1)
    d_g = (0.5001 * sx).square().mul(32).sum(-1).sqrt()          # [N, G] per group
    G = d_g.shape[1]
    a_g = W8.view(W8.shape[0], G, 32).norm(dim=2)               # [V, G]
    hn = hp.norm(dim=1, keepdim=True)
    nb = k // 32
    act = d_g[:, :nb] @ a_g[:, :nb].T + d_g[:, nb:].square().sum(1, keepdim=True).sqrt() * a_g[:, nb:].norm(dim=1)[None]
    eps = hn * e + act + 1e-4 * hn * a_g.norm(dim=1).max()
    true_err = (approx - h[test] @ W.T).abs()
    assert (true_err <= eps).all()
    floor = (approx - eps).amax(1, keepdim=True)
    margin = torch.exp2(torch.floor(torch.log2((approx + eps).abs().amax(1, keepdim=True))) - 7)
    cand = approx + eps >= floor - margin
    n = cand.sum(1).float()
    ok = (exact[test].argmax(1) == torch.where(cand, exact[test], -1e30).argmax(1)).float().mean()
    print(f"k={k}: bound median {eps.median():.3f}; candidates median {n.median():.0f} mean {n.mean():.0f} p90 {n.quantile(.9):.0f} p99 {n.quantile(.99):.0f} max {n.max():.0f}; ok {ok:.4f}")
