#!/usr/bin/env bash
# before/after of "fp32 linears packed": runtime/ops.py of a3f3e6d (fp32 linears on torch's GEMM)
# against this round's (fp32 linears packed, runtime/csrc/layer_cpu.cpp linear_packed_f32),
# alternated process by process. usage: ab.sh OUT_DIR SIDES_DIR (SIDES_DIR/{before,after}/ops.py)
set -e
out=$1; sides=$2; cd "$(dirname "$0")/../../../.."
mkdir -p "$out"; n=0
for side in before after before after; do
  cp "$sides/$side/ops.py" runtime/ops.py; n=$((n+1))
  chrt -f 10 .venv/bin/triforce bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 4 8 \
    --repeats 7 --dtypes fp32 --threads 2 --corpus essays --levels target --out "$out/passes_${n}_$side" > "$out/passes_${n}_$side.txt" 2>&1
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --out "$out/modes7k_${n}_$side" > "$out/modes7k_${n}_$side.txt" 2>&1
done
cp "$sides/after/ops.py" runtime/ops.py
echo done > "$out/DONE"
