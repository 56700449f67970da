#!/usr/bin/env bash
# Round 22: does `ar`'s greedy fp32 text change? The native sources of 5f7ca48 (round 21's end)
# against this tree's, each built in its own directory; the token ids of each side are compared.
# usage: same_text.sh CONTEXT NEW_TOKENS [ROPE_SCALING]
set -e
cd "$(dirname "$0")/../../.."
keep=$(mktemp -d); cp runtime/csrc/* "$keep/"
gen='import sys, torch
from triforce.runtime.assets import essays_text
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(2)
run = RunConfig(dtype="fp32", mode="ar", max_new_tokens=new, rope_scaling=sys.argv[3] if len(sys.argv) > 3 else None).validate()
engine = Engine(run)
ids = engine.tokenizer.encode(essays_text()[:context * 8])[:context]
print(" ".join(map(str, engine.generate(ids, run).token_ids)))'
for side in old new; do
  if [ $side = old ]; then git show 5f7ca48:runtime/csrc/attention_cpu.cpp > runtime/csrc/attention_cpu.cpp
    git show 5f7ca48:runtime/csrc/layer_cpu.cpp > runtime/csrc/layer_cpu.cpp; git show 5f7ca48:runtime/csrc/simd.h > runtime/csrc/simd.h
  else cp "$keep"/*.cpp "$keep"/*.h runtime/csrc/; fi
  TRIFORCE_NATIVE_DIR=build/native_text_$side .venv/bin/python -c "$gen" "$@" > "$keep/$side.txt"
done
cp "$keep"/*.cpp "$keep"/*.h runtime/csrc/
python3 - "$keep/old.txt" "$keep/new.txt" <<'PY'
import sys
a, b = (open(p).read().split() for p in sys.argv[1:])
d = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
print(f"{len(a)} / {len(b)} tokens: " + ("the same" if d is None and len(a) == len(b) else f"first difference at token {d}"))
PY
