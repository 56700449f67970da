#!/usr/bin/env bash
# Round 33's fourth GPU call: the middle level's passes of T > 1 also replayed in pieces (every level
# on the target's weights); the GPU tests and the passes of the two levels on the target's weights:
#   run(command="bash docs/bench/gpu-r33/gpu4.sh", kind="nvidia-h200")
source "$(dirname "$0")/common.sh"
exec > >(tee "$OUT/log4.txt") 2>&1
step 70 "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step 120 "2. passes, eager and replayed" python3 -m triforce.runtime.cli bench --suite passes \
  --model configs/models/llama2-7b-128k.json --draft-model configs/models/llama-68m.json --levels retrieval target \
  --dtypes bf16 --contexts 32000 120000 --pass-tokens 1 2 4 8 16 --repeats 5 --budget 4096 --cuda-graph --out $W/passes
cp $W/passes/passes.json $OUT/passes.json
echo "=== done $(date +%T)"
