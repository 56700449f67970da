#!/usr/bin/env bash
# before/after of "an fp32 model's decoder layers in one native call": runtime/model.py of 01106cf
# (the plan refused fp32) against this round's (DecoderPlan takes fp32), alternated process by
# process. usage: ab.sh OUT_DIR SIDES_DIR (SIDES_DIR/{before,after}/model.py)
set -e
out=$1; sides=$2; cd "$(dirname "$0")/../../../.."
mkdir -p "$out"; n=0
for side in before after before after; do
  cp "$sides/$side/model.py" runtime/model.py; n=$((n+1))
  chrt -f 10 .venv/bin/triforce bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 4 8 \
    --repeats 7 --dtypes fp32 --threads 2 --corpus essays --levels target --out "$out/passes_${n}_$side" > "$out/passes_${n}_$side.txt" 2>&1
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --out "$out/modes7k_${n}_$side" > "$out/modes7k_${n}_$side.txt" 2>&1
done
cp "$sides/after/model.py" runtime/model.py
echo done > "$out/DONE"
