#!/usr/bin/env bash
# Round 40: the passes suite at 8K (target and middle level, T = 1..4) before (OLD: a directory holding
# triforce/{runtime,actors,offload} of e59826f, OLDNAT its native build; no huge pages) and after
# (huge pages + one allocation for the weights), alternated three times.
#   OLD=/tmp/r40/shim OLDNAT=/tmp/r40/oldnat bash docs/bench/speed-zen3-r40/passes_ab8k.sh OUTDIR
set -eu
out=$1; mkdir -p "$out"
args=(bench --suite passes --dtypes bf16 --threads 2 --contexts 8000 --pass-tokens 1 2 3 4 --repeats 5
      --levels target retrieval --corpus essays)
for round in 1 2 3; do
  for side in old new; do
    if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
    env -u THP_MEM_ALLOC_ENABLE "${env[@]}" .venv/bin/python -m triforce.runtime.cli "${args[@]}" --out "$out/$side$round" 2>&1 \
      | grep -E "^\| [0-9]|Error|error" | awk '!seen[$0]++' | sed "s/^/$side$round /"
  done
done
