#!/usr/bin/env bash
# Round 36: the target's passes at 8K (T = 1, 3, 4, 5, 8; 5 repeats), before (OLD, OLDNAT as in
# modes_ab.sh) and after, alternated twice; JSON in passes/.
#   OLD=/tmp/r36/shim OLDNAT=/tmp/r36/oldnat bash docs/bench/speed-zen3-r36/passes_target_8k.sh OUTDIR
set -eu
out=$1; mkdir -p "$out"
for round in 1 2; do
  for side in old new; do
    if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
    env "${env[@]}" .venv/bin/python -m triforce.runtime.cli bench --suite passes --dtypes bf16 --threads 2 \
      --contexts 8000 --pass-tokens 1 3 4 5 8 --repeats 5 --levels target --corpus essays --out "$out/$side$round" 2>&1 \
      | grep -E "^\| 8000" | sed "s/^/$side$round /"
  done
done
