#!/bin/bash
cd /work/main && source .venv/bin/activate
for round in 1 2; do
  for variant in old new; do
    cp /tmp/r16/src_$variant/*.cpp runtime/csrc/
    export TRIFORCE_NATIVE_DIR=/tmp/r16/ab/build_$variant
    python -m triforce.runtime.native build > /dev/null 2>&1
    chrt -f 10 triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 --new-tokens 128 \
      --repeats 2 --dtypes bf16 --threads 2 --corpus essays --middle-weights int4 --draft-weights int4 \
      --draft-vocab 4096 --gamma auto --out /tmp/r16/e2e/${variant}_$round > /tmp/r16/e2e/${variant}_$round.log 2>&1
  done
done
cp /tmp/r16/src_new/*.cpp runtime/csrc/
echo done > /tmp/r16/e2e/DONE
