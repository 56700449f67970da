#!/usr/bin/env bash
# before/after of round 21 at 32K with the defaults (fp32, no flags): runtime/ops.py and
# runtime/model.py of a3f3e6d (round 20's end) against this round's (fp32 linears packed, fp32
# DecoderPlan), alternated process by process (the native sources are a superset: the old
# Python files never call the new paths). usage: ab.sh OUT_DIR SIDES_DIR
set -e
out=$1; sides=$2; cd "$(dirname "$0")/../../../.."
mkdir -p "$out"; n=0
for side in before after before after; do
  cp "$sides/$side/ops.py" runtime/ops.py; cp "$sides/$side/model.py" runtime/model.py; n=$((n+1))
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 32000 --modes ar triforce --temperatures 0 0.6 \
    --rope-scaling yarn:4 --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays \
    --out "$out/modes32k_${n}_$side" > "$out/modes32k_${n}_$side.txt" 2>&1
done
cp "$sides/after/ops.py" runtime/ops.py; cp "$sides/after/model.py" runtime/model.py
echo done > "$out/DONE"
