#!/usr/bin/env bash
# Round 33's second GPU call: the target's verify passes replayed in pieces (runtime/graphs.py
# PiecewisePass), one H200, random weights of the paper's shapes (timing only):
#   run(command="bash docs/bench/gpu-r33/gpu2.sh", kind="nvidia-h200")
source "$(dirname "$0")/common.sh"
exec > >(tee "$OUT/log2.txt") 2>&1
M7=configs/models/llama2-7b-128k.json; M68=configs/models/llama-68m.json
step 120 "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step 220 "2. passes, eager and replayed" python3 -m triforce.runtime.cli bench --suite passes --model $M7 --draft-model $M68 \
  --dtypes bf16 --contexts 32000 120000 --pass-tokens 1 2 4 8 16 --repeats 5 --budget 4096 --cuda-graph --out $W/passes
cp $W/passes/passes.json $OUT/passes.json
python3 -c "import random; random.seed(0); print(' '.join(f't{random.randrange(32000)}' for _ in range(32000)))" > $W/prompt.txt
T7=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('$M7'))" | tail -1)
T68=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('$M68'))" | tail -1)
G="--model $T7 --draft-model $T68 --dtype bf16 --prompt-file $W/prompt.txt --max-new-tokens 48 --retrieval-budget 4096"
step 60 "3a. generate 32K triforce, graphs" python3 -m triforce.runtime.cli generate $G --mode triforce --gamma1 2 --gamma2 6 --json $OUT/tf_graphs.json
step 60 "3b. generate 32K triforce, eager" python3 -m triforce.runtime.cli generate $G --mode triforce --gamma1 2 --gamma2 6 --no-cuda-graphs --json $OUT/tf_eager.json
echo "=== done $(date +%T)"
