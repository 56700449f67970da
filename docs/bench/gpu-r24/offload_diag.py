"""Round 24's second GPU call: why `ar` with KV and weights offloaded emitted other tokens than
resident (bf16, random 7B shape, 8K) once KV copies became contiguous runs (85b0e73), while KV alone
did not. The same request under three copy primitives: the runs (as shipped), the runs each followed
by a host sync of its lane (no asynchrony left), and round 20's one strided copy. A race shows as a
mismatch that the sync removes, or as two runs of one variant that differ."""
import json
import os
import sys
from pathlib import Path

import torch

from triforce.offload import tier
from triforce.runtime.bench.random_weights import random_checkpoint, random_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine

LAYERS = int(os.environ.get("LAYERS", "16"))
shape = json.loads(Path(os.environ.get("SHAPE", "configs/models/llama2-7b-128k.json")).read_text())
path = Path("/tmp/diag-shape.json")
path.write_text(json.dumps(dict(shape, num_hidden_layers=LAYERS)))
model = str(random_checkpoint(path))
ids = random_ids(shape["vocab_size"], int(os.environ.get("CONTEXT", "8192")))
base = dict(model=model, dtype="bf16", device=os.environ.get("DEVICE", "cuda"), mode="ar", max_new_tokens=24)



def runs(dst, src):
    for d, s in tier.contiguous_pairs(dst, src):
        d.copy_(s, non_blocking=True)


def runs_synced(dst, src):
    runs(dst, src)
    if torch.cuda.is_available():
        torch.cuda.current_stream().synchronize()   # the lane's stream: the copy is done before the next is issued


def strided(dst, src):
    dst.copy_(src, non_blocking=True)


resident = Engine(RunConfig(**base))
streamed = Engine(RunConfig(offload_weights=True, **base))
expected = resident.generate(ids, RunConfig(**base)).token_ids
again = resident.generate(ids, RunConfig(**base)).token_ids
report = dict(layers=LAYERS, resident_deterministic=again == expected, expected=expected)
print("resident twice equal:", again == expected, flush=True)
for name, copy in (("runs", runs), ("runs+sync", runs_synced), ("strided", strided), ("runs again", runs)):
    tier.Copier._copy = staticmethod(copy)
    kv = resident.generate(ids, RunConfig(on_chip_layers=0, **base)).token_ids
    kvw = [streamed.generate(ids, RunConfig(on_chip_layers=0, **base)).token_ids for _ in range(2)]
    w_only = streamed.generate(ids, RunConfig(**base)).token_ids
    row = dict(kv=kv == expected, kv_weights=[t == expected for t in kvw], weights_only=w_only == expected,
               first_diff=[next((i for i, (a, b) in enumerate(zip(t, expected)) if a != b), None) for t in kvw])
    report[name] = row
    print(name, row, flush=True)
out = Path(os.environ.get("OUT", "/tmp")) / "offload_diag.json"
out.write_text(json.dumps(report, indent=1))
print("wrote", out, file=sys.stderr)
