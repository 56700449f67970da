#!/usr/bin/env bash
# Round 33's third GPU call, after fixing call 2's failure (GraphedForward.captured on a piecewise
# pass): the GPU tests, and a 32K triforce request with every level replayed (random weights):
#   run(command="bash docs/bench/gpu-r33/gpu3.sh", kind="nvidia-h200")
source "$(dirname "$0")/common.sh"
exec > >(tee "$OUT/log3.txt") 2>&1
step 90 "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
python3 -c "import random; random.seed(0); print(' '.join(f't{random.randrange(32000)}' for _ in range(32000)))" > $W/prompt.txt
T7=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('configs/models/llama2-7b-128k.json'))" | tail -1)
T68=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('configs/models/llama-68m.json'))" | tail -1)
G="--model $T7 --draft-model $T68 --dtype bf16 --prompt-file $W/prompt.txt --max-new-tokens 48 --retrieval-budget 4096"
step 70 "2a. generate 32K triforce, graphs" python3 -m triforce.runtime.cli generate $G --mode triforce --gamma1 2 --gamma2 6 --json $OUT/tf_graphs.json
step 50 "2b. generate 32K ar, graphs" python3 -m triforce.runtime.cli generate $G --mode ar --json $OUT/ar_graphs.json
echo "=== done $(date +%T)"
