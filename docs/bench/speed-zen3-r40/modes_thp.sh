#!/usr/bin/env bash
# modes suite at 7K (essays, bf16, greedy and T = 0.6, --gamma auto), THP_MEM_ALLOC_ENABLE=0 against the default (on), alternated
set -u
out=$1; mkdir -p "$out"
args=(bench --suite modes --dtypes bf16 --threads 2 --corpus essays --contexts ${CONTEXTS:-7168} --temperatures 0 0.6
      --modes ar triforce --new-tokens 128 --repeats 2 --gamma auto ${EXTRA:-})
for i in ${ROUNDS:-1 2}; do for side in off on; do
  if [[ $side == off ]]; then env=(THP_MEM_ALLOC_ENABLE=0); else env=(); fi
  env "${env[@]}" .venv/bin/python -m triforce.runtime.cli "${args[@]}" --out "$out/$side$i" 2>&1 | grep -E "^\| [0-9]" | sed "s/^/$side$i /"
done; done
