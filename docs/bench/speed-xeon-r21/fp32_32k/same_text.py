"""Round 21: does `ar`'s greedy fp32 text change with the packed fp32 linears and the fp32 plan?
The old behaviour is the new code with fp32 refused by ops.packable and model._build_plan (what
a3f3e6d's two files did). usage: python same_text.py CONTEXT NEW_TOKENS [ROPE_SCALING]"""
import sys

import torch

from triforce.runtime import model as model_mod, ops
from triforce.runtime.assets import essays_text
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

context, new = int(sys.argv[1]), int(sys.argv[2])
rope = sys.argv[3] if len(sys.argv) > 3 else None
torch.set_num_threads(2)
run = RunConfig(dtype="fp32", mode="ar", max_new_tokens=new, rope_scaling=rope).validate()
out = {}
for side in ("new", "old"):
    if side == "old":
        packable, build = ops.packable, model_mod._build_plan
        ops.packable = lambda m: packable(m) and m.weight.dtype != torch.float32
        model_mod._build_plan = lambda m: None if m.dtype == torch.float32 else build(m)
        model_mod._PLANS.clear()
    engine = Engine(run)
    ids = engine.tokenizer.encode(essays_text()[:context * 8])[:context]
    out[side] = engine.generate(ids, run).token_ids
    print(side, len(out[side]), flush=True)
same = next((i for i, (a, b) in enumerate(zip(out["new"], out["old"])) if a != b), None)
print(f"context {context}: {'the same ' + str(len(out['new'])) + ' tokens' if same is None else 'first difference at token ' + str(same)}")
