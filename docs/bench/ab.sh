#!/usr/bin/env bash
# Before/after, alternated process by process (before, after, before, after). Each side copies its
# version of the named files into the tree (SIDES_DIR/{before,after}/<file name>), builds the native
# kernels into its own directory (build/native_<side>), then runs the suite. The after side's files
# are left in place.
# usage: ab.sh OUT_DIR SIDES_DIR 7k|32k|bf16 PATH...   (each PATH relative to the repository root)
#   7k:   the passes suite (fp32, 8K and 32K, T = 1 / 4 / 8, the target), then the modes suite at 7K
#   32k:  the modes suite at 32K (yarn:4)
#   bf16: the passes suite in bf16 (the bf16 lower levels: budget 1,024, int4 middle)
# e.g. round 21: ab.sh OUT SIDES 7k runtime/ops.py; round 22: ab.sh OUT SIDES 7k runtime/csrc/attention_cpu.cpp
set -e
out=$1; sides=$(realpath "$2"); what=$3; shift 3; cd "$(dirname "$0")/../.."
case $what in 7k|32k|bf16) ;; *) echo "ab.sh: suite must be 7k, 32k or bf16, got '$what'" >&2; exit 2 ;; esac
mkdir -p "$out"; out=$(realpath "$out"); n=0
place() { for path in "$@"; do cp "$sides/$side/$(basename "$path")" "$path"; done; }
for side in before after before after; do
  place "$@"; n=$((n+1))
  export TRIFORCE_NATIVE_DIR=build/native_$side
  .venv/bin/python -m triforce.runtime.native build > /dev/null
  if [ "$what" = 32k ]; then
    chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 32000 --modes ar triforce --temperatures 0 0.6 \
      --rope-scaling yarn:4 --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays \
      --out "$out/modes32k_${n}_$side" > "$out/modes32k_${n}_$side.txt" 2>&1
    continue
  fi
  if [ "$what" = bf16 ]; then
    chrt -f 10 .venv/bin/triforce bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 4 8 \
      --repeats 7 --dtypes bf16 --threads 2 --corpus essays --levels target --budget 1024 --middle-weights int4 \
      --out "$out/passes_bf16_${n}_$side" > "$out/passes_bf16_${n}_$side.txt" 2>&1
    continue
  fi
  chrt -f 10 .venv/bin/triforce bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 4 8 \
    --repeats 7 --dtypes fp32 --threads 2 --corpus essays --levels target --out "$out/passes_${n}_$side" > "$out/passes_${n}_$side.txt" 2>&1
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --out "$out/modes7k_${n}_$side" > "$out/modes7k_${n}_$side.txt" 2>&1
done
side=after; place "$@"
echo done > "$out/DONE"
