#!/usr/bin/env bash
# Round 34's third GPU call: the glue ops compiled with dynamic shapes (fewer compiles); the GPU
# tests; the passes at 32K; 32K requests end to end, `ar` twice (the second finds inductor's
# on-disk cache, as every later process does):
#   run(command="bash docs/bench/gpu-r34/gpu3.sh", kind="nvidia-h200")
source "$(dirname "$0")/../gpu-r33/common.sh"
exec > >(tee "$OUT/log3.txt") 2>&1
D=docs/bench/gpu-r34
step 150 "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider -rP tests/test_gpu.py
P="--suite passes --model configs/models/llama2-7b-128k.json --draft-model configs/models/llama-68m.json --dtypes bf16
   --contexts 32000 --pass-tokens 1 2 8 16 --repeats 5 --budget 4096 --cuda-graph --levels retrieval target"
step 120 "2. passes 32K, glue compiled" env TORCH_LOGS=recompiles python3 $D/bench.py fused $P --out $W/fused
cp $W/fused/passes.json $OUT/passes_fused.json
python3 -c "import random; random.seed(0); print(' '.join(f't{random.randrange(32000)}' for _ in range(32000)))" > $W/prompt.txt
T7=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('configs/models/llama2-7b-128k.json'))" | tail -1)
T68=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('configs/models/llama-68m.json'))" | tail -1)
G="--model $T7 --draft-model $T68 --dtype bf16 --prompt-file $W/prompt.txt --max-new-tokens 48 --retrieval-budget 4096"
step 70 "3a. generate 32K ar" python3 -m triforce.runtime.cli generate $G --mode ar --json $OUT/ar.json
step 70 "3b. generate 32K ar again" python3 -m triforce.runtime.cli generate $G --mode ar --json $OUT/ar2.json
step 80 "3c. generate 32K triforce" python3 -m triforce.runtime.cli generate $G --mode triforce --gamma1 2 --gamma2 6 --json $OUT/tf.json
echo "=== done $(date +%T)"
