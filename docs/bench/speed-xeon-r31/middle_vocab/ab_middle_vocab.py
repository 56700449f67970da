"""Feasibility A/B: the middle level's head pruned to N tokens (the drafter's counts, as --draft-vocab
prunes the drafter's), against its full head; `triforce` requests (bf16, essays, --gamma auto), decode
ms/token and the levels' acceptance, the two alternated in one process. The pruning is patched into
Engine.level_model here (no flag exists).
    ab_middle_vocab.py CONTEXT NEW REPEATS N TEMPERATURE [ROPE_SCALING|none]"""
import argparse, collections, dataclasses, statistics, sys
import torch
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.vocab import drafter_token_counts, kept_token_ids
context, new, reps, N, temp = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
rope = sys.argv[6] if len(sys.argv) > 6 and sys.argv[6] != "none" else None
torch.set_num_threads(2)
run = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, rope_scaling=rope, gamma="auto", temperature=temp, seed=1)
engine = Engine(run, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
original = Engine.level_model
pruned = {}

def level_model(self, run, role):
    model = original(self, run, role)
    if role != "middle" or not use_pruned:
        return model
    if "m" not in pruned:
        counts = drafter_token_counts(getattr(self, "draft_dir", None), self.tokenizer, self.cfg.vocab_size)
        always = list(self.tokenizer.all_special_ids) + list(self.cfg.eos_token_ids)
        kept = kept_token_ids(counts, N, always)
        pruned["m"] = lower_level_copy(self.model, self.lower_levels(run).middle_weights, kept, dtype=model.dtype)
    return pruned["m"]

Engine.level_model = level_model
ms, acc, tokens = collections.defaultdict(list), collections.defaultdict(list), {}
for rep in range(reps + 1):
    for c in ((0, 1) if rep % 2 else (1, 0)):
        use_pruned = bool(c)
        r = engine.generate(ids, run)
        if temp == 0:
            assert tokens.setdefault("t", r.token_ids) == r.token_ids
        if rep:
            ms[c].append(1e3 * r.stats["decode_s"] / len(r.token_ids))
            lv = r.stats["levels"]
            acc[c].append((lv["retrieval"]["acceptance"], lv["target"]["acceptance"], r.stats["tokens_per_target_pass"],
                           lv["retrieval"]["seconds"] / max(lv["retrieval"]["passes"], 1) * 1e3))
for c, name in ((0, "full head"), (1, f"head of {N}")):
    a = list(zip(*acc[c]))
    print(f"{context} T={temp} {name}: median {statistics.median(ms[c]):.2f} ms/token (min {min(ms[c]):.2f}); "
          f"acceptance retrieval {statistics.median(a[0]):.3f} target {statistics.median(a[1]):.3f}; "
          f"tokens/target pass {statistics.median(a[2]):.2f}; middle pass {statistics.median(a[3]):.2f} ms", flush=True)
print(f"pruned faster in {sum(b < a for a, b in zip(ms[0], ms[1]))}/{len(ms[0])} pairs", flush=True)
