#!/usr/bin/env bash
# Round 36, 2-core AMD EPYC Zen 3 (AVX2 + FMA): the passes suite before (OLD: a directory holding
# triforce/{runtime,actors,offload} of the commit before the rows-in-lanes attention, OLDNAT its
# own native build) and after, alternated twice.
#   OLD=/tmp/r36/shim OLDNAT=/tmp/r36/oldnat [PASS_TOKENS="1 2 3 4"] bash docs/bench/speed-zen3-r36/passes_ab.sh OUTDIR
# (round 38: PASS_TOKENS="1 2 3 4", OLD = 1de20f2's shim, OLDNAT its native build)
set -eu
out=$1; mkdir -p "$out"
args=(bench --suite passes --dtypes bf16 --threads 2 --contexts 8000 32000 --pass-tokens ${PASS_TOKENS:-1 2 4 8} --repeats 3
      --levels target retrieval --corpus essays --rope-scaling yarn:4)
for round in 1 2; do
  for side in old new; do
    if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
    env "${env[@]}" .venv/bin/python -m triforce.runtime.cli "${args[@]}" --out "$out/$side$round" 2>&1 \
      | grep -E "^\| [a-z0-9]|Error|error" | sed "s/^/$side$round /"
  done
done
