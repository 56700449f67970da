#!/usr/bin/env bash
# The --gamma auto probe, before/after: SIDES/{before,after}/gamma.py alternated (7K twice, then 32K once each),
# the modes suite greedy with --gamma auto (fp32, essays, 128 tokens). usage: ab_probe.sh OUT SIDES
set -e
out=$(realpath -m "$1"); sides=$(realpath "$2"); cd "$(dirname "$0")/../../../.."; mkdir -p "$out"
for n in 1 2; do for side in before after; do
  cp "$sides/$side/gamma.py" runtime/gamma.py
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --gamma auto --out "$out/7k_${n}_$side" > "$out/7k_${n}_$side.txt" 2>&1
done; done
for side in after before; do
  cp "$sides/$side/gamma.py" runtime/gamma.py
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 32000 --rope-scaling yarn:4 --modes ar triforce --temperatures 0 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --gamma auto --out "$out/32k_$side" > "$out/32k_$side.txt" 2>&1
done
cp "$sides/after/gamma.py" runtime/gamma.py
