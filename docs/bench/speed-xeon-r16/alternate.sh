#!/bin/bash
# Process-level A/B of two versions of the native kernels: each round copies one version's
# sources into runtime/csrc, builds it (its own TRIFORCE_NATIVE_DIR) and runs one bench command;
# old, new, old, new. The working tree's sources are restored from src_new at the end.
#   alternate.sh OUT_DIR triforce bench --suite ... (the bench's own arguments, without --out)
# src_old / src_new: attention_cpu.cpp and layer_cpu.cpp of 6ed5fa2 and of the commit measured.
# Round 16 ran it with the passes suite command of round 15 (passes_ab/, new = c9e941e's
# kernels) and round 13's 7K modes command with --repeats 2 (e2e_7k/, new = 289dc85's).
out=$1; shift
cd /work/main && source .venv/bin/activate
for round in 1 2; do
  for variant in old new; do
    cp /tmp/r16/src_$variant/*.cpp runtime/csrc/
    export TRIFORCE_NATIVE_DIR=/tmp/r16/build_$variant
    python -m triforce.runtime.native build > /dev/null 2>&1
    chrt -f 10 "$@" --out "$out/${variant}_$round" > "$out/${variant}_$round.log" 2>&1
  done
done
cp /tmp/r16/src_new/*.cpp runtime/csrc/
