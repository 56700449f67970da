#!/usr/bin/env bash
# Rope tables, before/after: SIDES/{before,after}/ hold rope.py, cache_full.py, cache_retrieval.py,
# cache_streaming.py and student.py of each side; alternated twice, the passes suite at 8K (fp32, every level).
# usage: ab_rope.sh OUT SIDES
set -e
out=$(realpath -m "$1"); sides=$(realpath "$2"); cd "$(dirname "$0")/../../../.."; mkdir -p "$out"
files="runtime/rope.py runtime/cache_full.py runtime/cache_retrieval.py runtime/cache_streaming.py runtime/distill/student.py"
for n in 1 2; do for side in before after; do
  for f in $files; do cp "$sides/$side/$(basename $f)" $f; done
  chrt -f 10 .venv/bin/triforce bench --suite passes --contexts 8000 --pass-tokens 1 4 --repeats 9 --dtypes fp32 --threads 2 \
    --corpus essays --levels retrieval drafter target --out "$out/p_${n}_$side" > "$out/p_${n}_$side.txt" 2>&1
done; done
for f in $files; do cp "$sides/after/$(basename $f)" $f; done
