# Shared by round 34's GPU calls (sourced): $OUT, the checkout as the `triforce` package on
# PYTHONPATH, and step LIMIT NAME CMD... (each step under its own time limit).
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT" /tmp/site/triforce; W=/tmp/gpu-work; mkdir -p $W
for d in runtime actors offload; do ln -sfn "$PWD/$d" /tmp/site/triforce/$d; done
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 TRIFORCE_CACHE=/tmp/tf-cache
step() { local limit=$1 name=$2; shift 2; echo "=== $name ($(date +%T), limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@"; echo "=== $name: rc $? in $((SECONDS - t0)) s"; }
