"""Copy acceptance by match length at each verifier (target threshold lowered to NGRAM)."""
import argparse, dataclasses, sys, collections
import torch
from triforce.runtime import speculate, lookup as lk
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, tokens = int(sys.argv[1]), int(sys.argv[2]); temps = [float(t) for t in sys.argv[3].split(",")]
target_match = int(sys.argv[4]) if len(sys.argv) > 4 else 3
speculate.TARGET_MATCH = target_match
torch.set_num_threads(2)
rec = collections.defaultdict(lambda: [0, 0, 0, 0])   # rounds, copied, accepted, rejections
orig_copy = lk.ContextLookup.copy
def copy(self, seq, room, min_match):
    out = orig_copy(self, seq, room, min_match)
    self._m = 0
    if out:
        j = self.last.get(tuple(seq[-lk.NGRAM:])); end = len(seq) - lk.NGRAM; m = lk.NGRAM
        while m < 64 and j - (m - lk.NGRAM) > 0 and seq[j - (m - lk.NGRAM) - 1] == seq[end - (m - lk.NGRAM) - 1]:
            m += 1
        self._m = m
    return out
lk.ContextLookup.copy = copy
orig_vr = speculate.verify_round
def verify_round(stack, gammas, seq, k, generator, lookup=None, room=0):
    top = stack[-1]; before = (top.stats.copied, top.stats.copied_accepted)
    out = orig_vr(stack, gammas, seq, k, generator, lookup, room)
    n = top.stats.copied - before[0]
    if n:
        a = top.stats.copied_accepted - before[1]
        m = lookup._m; b = 3 if m == 3 else 4 if m < 8 else 8 if m < 16 else 16
        r = rec[(top.name, b)]; r[0] += 1; r[1] += n; r[2] += a; r[3] += a < n
    return out
speculate.verify_round = verify_round
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=tokens, gamma="auto", retrieval_budget=1024,
                 rope_scaling="yarn:4" if context > 8000 else None)
engine = Engine(base, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
for T in temps:
    for seed in (1, 2):
        rec.clear()
        res = engine.generate(ids, dataclasses.replace(base, temperature=T, top_p=0.9, seed=seed))
        print(f"T={T} seed={seed} decode ms/token {1000*res.decode_s/len(res.token_ids):.1f}" if hasattr(res, 'decode_s') else f"T={T} seed={seed}")
        for key in sorted(rec):
            r = rec[key]; print(f"  {key[0]:10s} match>={key[1]:2d}: rounds {r[0]:3d} copied {r[1]:4d} accepted {r[2]:4d} rejections {r[3]:3d} alpha {r[2]/max(1,r[2]+r[3]):.2f}")
        if T == 0: break
