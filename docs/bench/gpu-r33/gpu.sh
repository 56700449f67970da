#!/usr/bin/env bash
# Round 33's GPU call (one H200, random weights of the paper's shapes: timing only):
#   run(command="bash docs/bench/gpu-r33/gpu.sh", kind="nvidia-h200")
# 1. the GPU tests; 2. attention candidates for a replayed verify pass (attn_graph.py);
# 3. `ar` replaying its 1-token passes against eager at 32K / 64K (one engine, one prefill each)
# and 120K (a prefill per request). Each step has its own limit; results under $OUT.
source "$(dirname "$0")/common.sh"
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers; print('torch', torch.__version__, torch.cuda.get_device_name(0), 'transformers', transformers.__version__)"
step 150 "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step 100 "2. attention candidates in a graph" python3 docs/bench/gpu-r33/attn_graph.py --out $OUT/attn.json
step 200 "3a. ar graphs vs eager, 32K and 64K" python3 docs/bench/gpu-r33/ar_graphs.py 32000,64000 $OUT/ar_32k_64k.json
step 110 "3b. ar graphs vs eager, 120K" python3 docs/bench/gpu-r33/ar_graphs.py 120000 $OUT/ar_120k.json --reps 1 --no-keep
echo "=== done $(date +%T)"
