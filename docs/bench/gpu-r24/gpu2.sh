#!/usr/bin/env bash
# Round 24's second GPU call: the graph test with its engine half in fp32, and offload_diag.py
# (why KV + weights offloaded changed `ar`'s tokens in the first call). run(command="bash docs/bench/gpu-r24/gpu2.sh")
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT" /tmp/site_new/triforce
for d in runtime actors offload; do ln -sfn "$PWD/$d" /tmp/site_new/triforce/$d; done
export PYTHONPATH=/tmp/site_new PYTHONUNBUFFERED=1 TRIFORCE_CACHE=/tmp/tf-cache
step() { local limit=$1 name=$2; shift 2; echo "=== $name ($(date +%T), limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@"; echo "=== $name: rc $? in $((SECONDS - t0)) s"; }
exec > >(tee "$OUT/log2.txt") 2>&1
step 60 "1. graph test" python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py -k replay
step 230 "2. offload diagnosis" python3 docs/bench/gpu-r24/offload_diag.py
echo "=== done $(date +%T)"
