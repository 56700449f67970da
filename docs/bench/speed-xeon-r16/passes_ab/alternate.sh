#!/bin/bash
# Process-level A/B: the project's own build of each source, alternating, passes suite.
cd /work/main && source .venv/bin/activate
for round in 1 2; do
  for variant in old new; do
    cp /tmp/r16/src_$variant/*.cpp runtime/csrc/
    export TRIFORCE_NATIVE_DIR=/tmp/r16/ab/build_$variant
    python -m triforce.runtime.native build > /dev/null 2>&1
    chrt -f 10 triforce bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 2 4 5 6 8 \
      --repeats 9 --dtypes bf16 --threads 2 --corpus essays --budget 1024 --middle-weights int4 --levels target retrieval \
      --out /tmp/r16/ab/${variant}_$round > /tmp/r16/ab/${variant}_$round.log 2>&1
  done
done
cp /tmp/r16/src_new/*.cpp runtime/csrc/
echo done > /tmp/r16/ab/DONE
