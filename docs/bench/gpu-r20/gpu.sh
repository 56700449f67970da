#!/usr/bin/env bash
# Round 20's GPU checks (../shared/GPU.md, items 1-4) in one device call, results under $OUT.
# Random weights of the paper's shapes (configs/models/llama2-7b-128k.json, llama-68m.json):
# timing only. Each step has its own time limit; a failure does not stop the next.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
W=/tmp/gpu-work; mkdir -p $W /tmp/site/triforce
for d in runtime actors offload; do ln -sfn "$PWD/$d" /tmp/site/triforce/$d; done
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRIFORCE_CACHE=/tmp/tf-cache
step() { local limit=$1 name=$2; shift 2; echo "=== $name ($(date +%T), limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@"; echo "=== $name: rc $? in $((SECONDS - t0)) s"; }
exec > >(tee "$OUT/log.txt") 2>&1
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, transformers, safetensors, msgpack; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__)"
  python3 -c "import ray; print('ray', ray.__version__)" 2>&1 | tail -1
  python3 -c "import flash_attn; print('flash_attn', flash_attn.__version__)" 2>&1 | tail -1; nproc; free -g | head -2; } 2>&1
M7=${M7:-configs/models/llama2-7b-128k.json}; M68=${M68:-configs/models/llama-68m.json}
step ${T_TEST:-110} "1. pytest -m gpu" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step ${T_PASSES:-170} "2. passes 32K/64K/120K" python3 -m triforce.runtime.cli bench --suite passes --model $M7 --draft-model $M68 --dtypes bf16 \
  --contexts ${CONTEXTS:-32000 65536 120000} --pass-tokens 1 2 4 8 16 --repeats 5 --budget ${BUDGET:-4096} --out $W/passes
cp $W/passes/passes.json "$OUT/" 2>/dev/null
step ${T_GRAPH:-80} "3. passes 32K with CUDA graphs" python3 -m triforce.runtime.cli bench --suite passes --model $M7 --draft-model $M68 --dtypes bf16 \
  --contexts ${GRAPH_CONTEXT:-32000} --pass-tokens 1 2 4 8 16 --repeats 5 --budget ${BUDGET:-4096} --cuda-graph --out $W/graphs
cp $W/graphs/passes.json "$OUT/graphs.json" 2>/dev/null
step ${T_OFFLOAD:-100} "4. offload 8K" python3 -m triforce.runtime.cli bench --suite offload --model $M7 --draft-model $M68 --dtypes bf16 \
  --contexts ${OFFLOAD_CONTEXT:-8192} --new-tokens 8 --repeats 1 --budget ${BUDGET:-4096} --out $W/offload
cp $W/offload/offload.json "$OUT/" 2>/dev/null
step 40 "4b. plan 8K and 122K" bash -c "python3 -m triforce.runtime.cli plan --model $M7 --draft-model $M68 --dtype bf16 --context 8200 --json $OUT/plan_8k.json; python3 -m triforce.runtime.cli plan --model $M7 --draft-model $M68 --dtype bf16 --context 122880 --json $OUT/plan_122k.json"
echo "=== done $(date +%T)"
