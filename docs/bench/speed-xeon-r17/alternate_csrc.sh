#!/bin/bash
# alternate_csrc.sh OUT ROUNDS cmd...: old, new alternated ROUNDS times; each copies /tmp/r17/src_{old,new}/*.cpp
# (layer_cpu.cpp of 95f8292 and of b45826a) into runtime/csrc and builds its own TRIFORCE_NATIVE_DIR
out=$1; shift; rounds=$1; shift
cd /work/main && source .venv/bin/activate
mkdir -p $out
for round in $(seq 1 $rounds); do
  for variant in old new; do
    cp /tmp/r17/src_$variant/*.cpp runtime/csrc/
    export TRIFORCE_NATIVE_DIR=/tmp/r17/build_$variant
    python -m triforce.runtime.native build > /dev/null 2>&1
    chrt -f 10 "$@" --out "$out/${variant}_$round" > "$out/${variant}_$round.log" 2>&1
  done
done
cp /tmp/r17/src_new/*.cpp runtime/csrc/
