#!/usr/bin/env bash
# Round 38, 2-core AMD EPYC Zen 3 (AVX2 + FMA): the passes suite before (OLD: a directory holding
# triforce/{runtime,actors,offload} of the commit before the change, OLDNAT its own native build) and
# after, alternated twice.
#   OLD=/tmp/r38/shim OLDNAT=/tmp/r37/oldnat bash docs/bench/speed-zen3-r38/passes_ab.sh OUTDIR
set -eu
out=$1; mkdir -p "$out"
args=(bench --suite passes --dtypes bf16 --threads 2 --contexts 8000 32000 --pass-tokens 1 2 3 4 --repeats 3
      --levels target retrieval --corpus essays --rope-scaling yarn:4)
for round in 1 2; do
  for side in old new; do
    if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
    env "${env[@]}" .venv/bin/python -m triforce.runtime.cli "${args[@]}" --out "$out/$side$round" 2>&1 \
      | grep -E "^\| [a-z0-9]|Error|error|native" | sed "s/^/$side$round /"
  done
done
