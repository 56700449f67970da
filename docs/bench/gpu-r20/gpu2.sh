#!/usr/bin/env bash
# Round 20's second GPU call: before/after of the two fixes the first call motivated, in one run.
#   attention: T > 1 passes through torch's lower-right CausalBias (flash) instead of a boolean mask
#   offload:   host<->device KV copies as contiguous runs instead of one strided copy
# "old" is this tree with runtime/attention.py and offload/tier.py of 34498b3: build it with
# docs/bench/gpu-r20/make_ab.sh, then run(command="bash docs/bench/gpu-r20/gpu2.sh", carry=[".ab"]).
# Round 20's own try of this script produced nothing: the CPU kernels compiled on the GPU machine
# and a killed build's lock hung every later step (both fixed in d6278c6; make_ab.sh includes it).
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
W=/tmp/gpu-work; mkdir -p $W /tmp/site_new/triforce
for d in runtime actors offload; do ln -sfn "$PWD/$d" /tmp/site_new/triforce/$d; done
ln -sfn "$PWD/.ab" /tmp/site_old
export PYTHONUNBUFFERED=1 TRIFORCE_CACHE=/tmp/tf-cache
step() { local limit=$1 name=$2; shift 2; echo "=== $name ($(date +%T), limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@"; echo "=== $name: rc $? in $((SECONDS - t0)) s"; }
bench() { local v=$1; shift; PYTHONPATH=/tmp/site_$v python3 -m triforce.runtime.cli bench "$@"; }
export -f bench
exec > >(tee "$OUT/log.txt") 2>&1
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
M="--model ${M7:-configs/models/llama2-7b-128k.json} --draft-model ${M68:-configs/models/llama-68m.json} --dtypes bf16"
for v in old new; do
  step 90 "passes $v" bash -c "bench $v --suite passes $M --contexts ${CONTEXTS:-32000 120000} --levels target retrieval \
    --pass-tokens 1 2 4 8 16 --repeats 5 --budget ${BUDGET:-4096} --cuda-graph --out $W/passes_$v"
  cp $W/passes_$v/passes.json "$OUT/passes_$v.json" 2>/dev/null
done
for v in old new; do
  step 80 "offload ar $v" bash -c "bench $v --suite offload $M --modes ar --contexts ${OFFLOAD_CONTEXT:-8192} --new-tokens 4 --repeats 1 \
    --budget ${BUDGET:-1024} --out $W/offload_$v"
  cp $W/offload_$v/offload.json "$OUT/offload_$v.json" 2>/dev/null
done
step 110 "pytest -m gpu" env PYTHONPATH=/tmp/site_new python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step 80 "offload triforce new" bash -c "bench new --suite offload $M --modes triforce --contexts ${OFFLOAD_CONTEXT:-8192} --new-tokens 8 \
  --repeats 1 --budget ${BUDGET:-1024} --out $W/offload_tf"
cp $W/offload_tf/offload.json "$OUT/offload_triforce.json" 2>/dev/null
echo "=== done $(date +%T)"
