"""Coverage of the target's next token by a head pruned to (the N most frequent ids of the drafter's
corpus) U (the ids of the context so far): greedy share, and mass at T = 0.6. Essays, windows of W tokens,
positions from W/2 on (a context of at least W/2 tokens)."""
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from triforce.runtime.assets import default_model_dir, essay_texts
from triforce.runtime.drafter import default_drafter_dir
from triforce.runtime.vocab import drafter_token_counts, kept_token_ids
torch.set_num_threads(2)
W = int(sys.argv[1]); windows = int(sys.argv[2])
md = default_model_dir(); tok = AutoTokenizer.from_pretrained(md)
model = AutoModelForCausalLM.from_pretrained(md, dtype=torch.bfloat16)
V = model.config.vocab_size
counts = drafter_token_counts(default_drafter_dir(), tok, V)
Ns = (0, 1024, 2048, 4096, 8192, 16384)
general = {n: torch.zeros(V, dtype=torch.bool) for n in Ns}
for n in Ns:
    if n: general[n].index_fill_(0, kept_token_ids(counts, n, list(tok.all_special_ids)), True)
text = "\n\n".join(essay_texts())
ids_all = tok(text, add_special_tokens=False)["input_ids"]
print("essays tokens", len(ids_all))
res = {n: [0, 0.0, 0] for n in Ns}; total = 0; sizes = []
for w in range(windows):
    ids = ids_all[w * W:(w + 1) * W]
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0].float()
    greedy, p06 = logits.argmax(-1), torch.softmax(logits / 0.6, -1)
    ctx = torch.zeros(V, dtype=torch.bool)
    ctx[torch.tensor(ids[:W // 2])] = True           # the prompt: the first half; predictions over the second half
    for p in range(W // 2, W - 1):
        total += 1
        for n in Ns:
            k = general[n] | ctx
            res[n][0] += int(k[greedy[p]]); res[n][1] += p06[p, k].sum().item()
    for n in Ns: res[n][2] += int((general[n] | ctx).sum())
for n in Ns:
    print(f"top {n:5d} U context: greedy {res[n][0]/total:.4f}  mass T=0.6 {res[n][1]/total:.4f}  kept ids {res[n][2]/windows:.0f}")
