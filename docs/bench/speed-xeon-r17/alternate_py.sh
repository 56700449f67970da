#!/bin/bash
# alternate_py.sh OUT ROUNDS cmd...: old, new alternated; each copies /tmp/r17/py_{old,new}/*.py into runtime/
# (gamma, speculate, engine, cache_streaming of b45826a and of this round's tree; same native build)
out=$1; shift; rounds=$1; shift
cd /work/main && source .venv/bin/activate
mkdir -p $out
for round in $(seq 1 $rounds); do
  for variant in old new; do
    cp /tmp/r17/py_$variant/*.py runtime/
    chrt -f 10 "$@" --out "$out/${variant}_$round" > "$out/${variant}_$round.log" 2>&1
  done
done
cp /tmp/r17/py_new/*.py runtime/
