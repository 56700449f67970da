#!/usr/bin/env bash
# Round 34's first GPU call: the GPU tests (round 33's last changes and the compiled glue ops), the
# passes of the two levels on the target's weights with the glue ops unfused (before) and compiled
# (after), the middle level on int8 weights, and 32K requests end to end:
#   run(command="bash docs/bench/gpu-r34/gpu1.sh", kind="nvidia-h200")
source "$(dirname "$0")/../gpu-r33/common.sh"
exec > >(tee "$OUT/log1.txt") 2>&1
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
step 150 "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
P="--suite passes --model configs/models/llama2-7b-128k.json --draft-model configs/models/llama-68m.json --dtypes bf16
   --contexts 32000 --pass-tokens 1 2 4 8 16 --repeats 5 --budget 4096 --cuda-graph"
bench() { python3 -c "import sys; from triforce.runtime import ops; ops.FUSE_CUDA = sys.argv[1] == 'fused'
from triforce.runtime.cli import main; sys.exit(main(['bench'] + sys.argv[2:]))" "$@"; }
step 100 "2a. passes 32K, glue unfused" bench unfused $P --levels retrieval target --out $W/unfused
step 150 "2b. passes 32K, glue compiled" bench fused $P --levels retrieval target --out $W/fused
step 100 "2c. passes 32K, middle level int8, glue compiled" bench fused $P --levels retrieval --middle-weights int8 --out $W/int8
for d in unfused fused int8; do cp $W/$d/passes.json $OUT/passes_$d.json; done
python3 -c "import random; random.seed(0); print(' '.join(f't{random.randrange(32000)}' for _ in range(32000)))" > $W/prompt.txt
T7=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('configs/models/llama2-7b-128k.json'))" | tail -1)
T68=$(python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('configs/models/llama-68m.json'))" | tail -1)
G="--model $T7 --draft-model $T68 --dtype bf16 --prompt-file $W/prompt.txt --max-new-tokens 48 --retrieval-budget 4096"
step 80 "3a. generate 32K triforce" python3 -m triforce.runtime.cli generate $G --mode triforce --gamma1 2 --gamma2 6 --json $OUT/tf.json
step 60 "3b. generate 32K ar" python3 -m triforce.runtime.cli generate $G --mode ar --json $OUT/ar.json
echo "=== done $(date +%T)"
