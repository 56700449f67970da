#!/usr/bin/env bash
# Round 19: a 32K `ar` prefill with attention_cpu.cpp of DIR/old and DIR/new alternately (ROUNDS
# times each, process by process; each version's source copied into the tree and built into its own
# TRIFORCE_NATIVE_DIR first). bash prefill_ab.sh DIR PROMPT OUT ROUNDS
set -euo pipefail
dir=$1 prompt=$2 out=$3 rounds=$4
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for v in old new; do
    cp "$dir/$v/attention_cpu.cpp" runtime/csrc/
    export TRIFORCE_NATIVE_DIR=$dir/build_$v
    python -m triforce.runtime.native build > /dev/null 2>&1
    chrt -f 10 triforce generate --prompt-file "$prompt" --mode ar --dtype bf16 --max-new-tokens 2 --rope-scaling yarn:4 \
      --quiet --json "$out/${v}_$r.json" 2>&1 | grep "mode=" | sed "s/^/$v $r: /"
  done
done
cp "$dir/new/attention_cpu.cpp" runtime/csrc/
