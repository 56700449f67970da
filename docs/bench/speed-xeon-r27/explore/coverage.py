import numpy as np, torch
from triforce.runtime.assets import essays_text, default_model_dir
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(default_model_dir())
ids = tok(essays_text(), add_special_tokens=False)["input_ids"]
counts = torch.from_numpy(np.load("drafters/smollm2-135m-instruct/token_counts.npy").astype(np.int64))
order = counts.argsort(descending=True)
print(len(ids))
for P in (7168, 32000):
    for start in (P, P + 40000):
        prompt = ids[start - P:start]; cont = ids[start:start + 512]
        pset = set(prompt)
        row = [f"P={P} at {start}: prompt distinct {len(pset)}"]
        row.append(f"prompt {np.mean([t in pset for t in cont]):.3f}")
        for N in (4096, 8192, 16384):
            top = set(order[:N].tolist())
            row.append(f"top{N} {np.mean([t in top for t in cont]):.3f} union {np.mean([t in top or t in pset for t in cont]):.3f} size {len(top | pset)}")
        print(" | ".join(row))
