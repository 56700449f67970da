#!/usr/bin/env bash
# Round 34's second GPU call: why call 1's compiled glue ops were slow (glue_probe.py, dynamo's
# recompile log), then the passes with the glue ops unfused and compiled:
#   run(command="bash docs/bench/gpu-r34/gpu2.sh", kind="nvidia-h200")
source "$(dirname "$0")/../gpu-r33/common.sh"
exec > >(tee "$OUT/log2.txt") 2>&1
D=docs/bench/gpu-r34
step 120 "1. glue probe" env TORCH_LOGS=recompiles python3 $D/glue_probe.py
P="--suite passes --model configs/models/llama2-7b-128k.json --draft-model configs/models/llama-68m.json --dtypes bf16
   --contexts 32000 --pass-tokens 1 2 8 --repeats 5 --budget 4096 --cuda-graph --levels retrieval target"
step 100 "2a. passes 32K, glue unfused" python3 $D/bench.py unfused $P --out $W/unfused
step 150 "2b. passes 32K, glue compiled" env TORCH_LOGS=recompiles python3 $D/bench.py fused $P --out $W/fused
for d in unfused fused; do cp $W/$d/passes.json $OUT/passes_$d.json; done
echo "=== done $(date +%T)"
