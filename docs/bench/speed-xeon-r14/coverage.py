# usage: python coverage.py   (round 14) How much of the target's next-token choice a head pruned to the N
# most frequent ids of the embedded drafter's distillation corpus keeps, on the essays: the share of
# greedy tokens among the kept ids, and the target's probability mass on them at T = 0.6 and T = 1
# (8 essays, the first 1,024 tokens of each; transformers' model, fp32). An upper bound on what
# --middle-vocab N costs the middle level's acceptance.
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from triforce.runtime.assets import default_model_dir, essay_texts
from triforce.runtime.drafter import default_drafter_dir
from triforce.runtime.vocab import drafter_token_counts, kept_token_ids

torch.set_num_threads(2)
md = default_model_dir()
tok = AutoTokenizer.from_pretrained(md)
model = AutoModelForCausalLM.from_pretrained(md, dtype=torch.float32)
V = model.config.vocab_size
counts = drafter_token_counts(default_drafter_dir(), tok, V)
print("counted tokens", int(counts.sum()), "distinct", int((counts > 0).sum()))
Ns = (4096, 8192, 12288, 16384, 24576, 32768)
kept = {n: torch.zeros(V, dtype=torch.bool).index_fill_(0, kept_token_ids(counts, n, list(tok.all_special_ids)), True)
        for n in Ns}
sums, total = {n: [0.0, 0.0, 0.0] for n in Ns}, 0
texts = essay_texts()
for i in range(0, 40, 5):
    ids = tok(texts[i], add_special_tokens=False)["input_ids"][:1024]
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].float()
    greedy, p06, p1 = logits.argmax(-1), torch.softmax(logits / 0.6, -1), torch.softmax(logits, -1)
    total += len(ids)
    for n in Ns:
        k = kept[n]
        sums[n][0] += k[greedy].sum().item()
        sums[n][1] += p06[:, k].sum().item()
        sums[n][2] += p1[:, k].sum().item()
for n in Ns:
    print(n, "greedy in kept %.4f  mass T=0.6 %.4f  T=1 %.4f" % tuple(x / total for x in sums[n]))
