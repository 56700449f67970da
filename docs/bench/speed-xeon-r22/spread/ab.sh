#!/usr/bin/env bash
# before/after of "the fma products prefetch as they go": runtime/csrc/attention_cpu.cpp of 5f7ca48
# (the packers prefetch in bursts) against this round's (Spread; fp32 V read where it lies),
# alternated process by process, each side with its own build directory.
# usage: ab.sh OUT_DIR SIDES_DIR [7k|32k] (SIDES_DIR/{before,after}/attention_cpu.cpp)
#   7k (default): the passes suite at 8K and 32K, then the modes suite at 7K
#   32k: the modes suite at 32K (yarn:4)
set -e
out=$1; sides=$2; what=${3:-7k}; cd "$(dirname "$0")/../../../.."
mkdir -p "$out"; n=0
for side in before after before after; do
  cp "$sides/$side/attention_cpu.cpp" runtime/csrc/attention_cpu.cpp; n=$((n+1))
  export TRIFORCE_NATIVE_DIR=build/native_$side
  .venv/bin/python -m triforce.runtime.native build > /dev/null
  if [ "$what" = 32k ]; then
    chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 32000 --modes ar triforce --temperatures 0 0.6 \
      --rope-scaling yarn:4 --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays \
      --out "$out/modes32k_${n}_$side" > "$out/modes32k_${n}_$side.txt" 2>&1
    continue
  fi
  chrt -f 10 .venv/bin/triforce bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 4 8 \
    --repeats 7 --dtypes fp32 --threads 2 --corpus essays --levels target --out "$out/passes_${n}_$side" > "$out/passes_${n}_$side.txt" 2>&1
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --out "$out/modes7k_${n}_$side" > "$out/modes7k_${n}_$side.txt" 2>&1
done
cp "$sides/after/attention_cpu.cpp" runtime/csrc/attention_cpu.cpp
echo done > "$out/DONE"
