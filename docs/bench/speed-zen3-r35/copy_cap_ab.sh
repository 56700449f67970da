#!/usr/bin/env bash
# Round 35: the modes suite at 7K (essays, bf16, greedy and T = 0.6) before (OLD: a shim directory
# of the commit before the cost-aware copy length, OLDNAT its native build) and after, one after the other.
#   OLD=/tmp/r35/shimh OLDNAT=/tmp/r35/headnat [SIDES="new old"] bash docs/bench/speed-zen3-r35/copy_cap_ab.sh OUTDIR
set -eu
out=$1; mkdir -p "$out"
args=(bench --suite modes --dtypes bf16 --threads 2 --corpus essays --contexts 7168 --temperatures 0 0.6
      --modes ar triforce --new-tokens 128 --repeats 2 --gamma auto)
for side in ${SIDES:-new old}; do
  if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
  env "${env[@]}" .venv/bin/python -m triforce.runtime.cli "${args[@]}" --out "$out/$side" 2>&1 | grep -E "^\| 7168" | sed "s/^/$side /"
done
