"""python scorer.py mean|mass|max CLI-ARGS...: the lower suite with the retrieval cache's chunk scorer swapped."""
import math, sys
import torch
import triforce.runtime.cache_retrieval as cr
from triforce.runtime import cli

def mass_scores(keys, query, chunk):
    B, Hkv, S, D = keys.shape
    g = query.float().view(B, Hkv, -1, D)
    s = torch.einsum("bhgd,bhsd->bhgs", g, keys.float()) / math.sqrt(D)
    p = torch.softmax(s, dim=-1)
    return p.view(B, Hkv, g.shape[2], S // chunk, chunk).sum(dim=(2, 4))

def max_scores(keys, query, chunk):
    B, Hkv, S, D = keys.shape
    g = query.float().view(B, Hkv, -1, D)
    s = torch.einsum("bhgd,bhsd->bhgs", g, keys.float()) / math.sqrt(D)
    p = torch.softmax(s, dim=-1)
    return p.view(B, Hkv, g.shape[2], S // chunk, chunk).amax(dim=4).sum(dim=2)

kind = sys.argv.pop(1)
if kind == "mass": cr.chunk_scores = mass_scores
elif kind == "max": cr.chunk_scores = max_scores
sys.exit(cli.main(sys.argv[1:]))
