#!/usr/bin/env bash
# the same before/after as ab.sh, end to end at 32K with the defaults (fp32, no flags but the
# rope scaling the context needs). usage: ab32k.sh OUT_DIR SIDES_DIR
set -e
out=$1; sides=$2; cd "$(dirname "$0")/../../../.."
mkdir -p "$out"; n=0
for side in before after before after; do
  cp "$sides/$side/attention_cpu.cpp" runtime/csrc/attention_cpu.cpp; n=$((n+1))
  export TRIFORCE_NATIVE_DIR=build/native_$side
  .venv/bin/python -m triforce.runtime.native build > /dev/null
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 32000 --modes ar triforce --temperatures 0 0.6 \
    --rope-scaling yarn:4 --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays \
    --out "$out/modes32k_${n}_$side" > "$out/modes32k_${n}_$side.txt" 2>&1
done
cp "$sides/after/attention_cpu.cpp" runtime/csrc/attention_cpu.cpp
echo done > "$out/DONE"
