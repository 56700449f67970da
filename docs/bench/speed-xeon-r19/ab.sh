#!/usr/bin/env bash
# Round 19: a command with attention_cpu.cpp of DIR/old and DIR/new alternately (ROUNDS times each,
# process by process; each version's source copied into the tree and built into its own
# TRIFORCE_NATIVE_DIR first). {out} in the command becomes OUT/VERSION_ROUND.
#   bash ab.sh DIR OUT ROUNDS cmd...
# 32K prefill: bash ab.sh DIR OUT 2 triforce generate --prompt-file P32K --mode ar --dtype bf16 \
#                --max-new-tokens 2 --rope-scaling yarn:4 --quiet --json {out}.json
# passes:      bash ab.sh DIR OUT 2 triforce bench --suite passes ... --out {out}
set -euo pipefail
dir=$1 out=$2 rounds=$3; shift 3
mkdir -p "$out"
for r in $(seq 1 "$rounds"); do
  for v in old new; do
    cp "$dir/$v/attention_cpu.cpp" runtime/csrc/
    export TRIFORCE_NATIVE_DIR=$dir/build_$v
    python -m triforce.runtime.native build > /dev/null 2>&1
    chrt -f 10 "${@//\{out\}/$out/${v}_$r}" 2>&1 | grep -E "mode=|^\| *[0-9]" | sed "s/^/$v $r: /" || true
  done
done
cp "$dir/new/attention_cpu.cpp" runtime/csrc/
