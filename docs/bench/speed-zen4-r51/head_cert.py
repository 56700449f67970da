"""How many candidates a greedy head needs to be certified exact. An int8 copy of the tied head (a scale per row, the
activations rounded to int8 per group of 32 columns, as quant_cpu.cpp's int8_linear computes) ranks the vocabulary;
a token is a candidate unless its approximate logit plus its error bound falls below the best approximate logit
minus that one's bound (less a margin for bf16 rounding); candidates get exact logits. The bound is
|h|.|w - w8| + |h - h8|.|w8| (Cauchy-Schwarz), per token (e_v, a_v) or one for the whole vocabulary.
python head_cert.py N_TOKENS"""
import sys, torch, transformers
from triforce.runtime.assets import default_model_dir
from triforce.runtime.bench.suites import corpus_text
N = int(sys.argv[1])
d = default_model_dir()
tok = transformers.AutoTokenizer.from_pretrained(str(d))
model = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32).eval()
ids = tok.encode(corpus_text("essays")[:8 * N])[:N]
with torch.inference_mode():
    h = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0]   # [N, E], after the final norm
W = model.lm_head.weight.detach().bfloat16().float()                                     # [V, E] as the bf16 model holds it
h = h.bfloat16().float()
exact = (h @ W.T).bfloat16().float()                                                     # [N, V] the bf16 head's logits
sw = W.abs().amax(1, keepdim=True) / 127
W8 = (W / sw).round().clamp(-127, 127) * sw
g = h.view(N, -1, 32)
sx = g.abs().amax(-1, keepdim=True) / 127
h8 = ((g / sx).round() * sx).view(N, -1)
approx = h8 @ W8.T
e, a = (W - W8).norm(dim=1), W8.norm(dim=1)                                              # [V]
hn, dn = h.norm(dim=1, keepdim=True), (0.5001 * sx).square().mul(32).sum((1, 2)).sqrt()[:, None]   # [N, 1]
true_err = (approx - h @ W.T).abs()
for name, eps in (("per token", hn * e + dn * a), ("uniform", hn * e.max() + dn * a.max())):
    eps = eps + 1e-4 * (hn + dn) * a.max()
    assert (true_err <= eps).all()
    floor = (approx - eps).amax(1, keepdim=True)
    top = (approx + eps).abs().amax(1, keepdim=True)
    margin = torch.exp2(torch.floor(torch.log2(top)) - 7)                                # a bf16 ulp at the largest
    cand = approx + eps >= floor - margin
    n = cand.sum(1).float()
    ok = (exact.argmax(1) == torch.where(cand, exact, -1e30).argmax(1)).float().mean()
    print(f"int8, {name} bound: median bound {eps.median():.3f} (true error {true_err.median():.4f}); candidates a row: "
          f"median {n.median():.0f}, p90 {n.quantile(0.9):.0f}, p99 {n.quantile(0.99):.0f}, max {n.max():.0f}; "
          f"blocks of 16 touched, median {(cand.view(N, -1, 16).any(-1).sum(1).float()).median():.0f}; argmax kept {ok:.4f}")
