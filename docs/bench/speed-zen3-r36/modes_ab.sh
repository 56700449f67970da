#!/usr/bin/env bash
# Round 36: the modes suite at 7K (essays, bf16, greedy and T = 0.6, --gamma auto) before (OLD: a
# directory holding triforce/{runtime,actors,offload} of the commit before the rows-in-lanes
# attention, OLDNAT its native build) and after, one side after the other.
#   OLD=/tmp/r36/shim OLDNAT=/tmp/r36/oldnat [SIDES="new old"] bash docs/bench/speed-zen3-r36/modes_ab.sh OUTDIR
set -eu
out=$1; mkdir -p "$out"
args=(bench --suite modes --dtypes bf16 --threads 2 --corpus essays --contexts ${CONTEXTS:-7168} --temperatures 0 0.6
      --modes ar triforce --new-tokens 128 --repeats 2 --gamma auto ${EXTRA:-})
for side in ${SIDES:-new old}; do
  if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
  env "${env[@]}" .venv/bin/python -m triforce.runtime.cli "${args[@]}" --out "$out/$side" 2>&1 | grep -E "^\| [0-9]" | sed "s/^/$side /"
done
