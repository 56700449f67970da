"""Expected accepted tokens per round under token-level vs block verification, pathwise on the drafts a
real run makes (standard rule generating): E[tau_std] = sum_i prod_{j<=i} min(1, r_j); E[tau_block] = sum_i p_i."""
import dataclasses, inspect, sys, os, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
import torch
from triforce.runtime import speculate as SP
S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
orig = SP.accept
rec = {}
def wrapped(draft_tokens, draft_probs, target_probs, generator):
    top = inspect.currentframe().f_back.f_locals["top"].name
    K = draft_tokens.shape[1]
    if K:
        tok = draft_tokens[0]
        p = target_probs[0, :K].gather(-1, tok[:, None]).squeeze(-1).double()
        q = draft_probs[0].gather(-1, tok[:, None]).squeeze(-1).double()
        r = torch.where(q > 0, p / q.clamp_min(1e-300), torch.zeros_like(p))
        std, blk, prod, pb = 0.0, 0.0, 1.0, 1.0
        for i in range(K):
            prod *= min(1.0, float(r[i])); std += prod
            pb = min(pb * float(r[i]), 1.0); blk += pb
        rec.setdefault(top, []).append((K, std, blk))
    return orig(draft_tokens, draft_probs, target_probs, generator)
SP.accept = wrapped
eng.generate(ids, run)
rec.clear()
for r in range(R):
    eng.generate(ids, dataclasses.replace(run, seed=300 + r))
for lv, rows in rec.items():
    n = len(rows); std = sum(x[1] for x in rows); blk = sum(x[2] for x in rows); ks = sum(x[0] for x in rows)
    print(f"{lv}: rounds {n}, mean K {ks/n:.2f}, E[accepted] std {std/n:.3f} block {blk/n:.3f}; "
          f"tokens per round (accepted+1) {1+std/n:.3f} -> {1+blk/n:.3f} ({(1+blk/n)/(1+std/n)-1:+.1%})")
