#!/usr/bin/env bash
# Round 34, 2-core AMD EPYC Zen 3 (AVX2 + FMA, no AVX-512): the passes suite at the session's start
# (4d7fac6, its own native build: scalar kernels here) and at HEAD, alternated twice.
#   OLD=/tmp/r34/shim bash docs/bench/speed-zen3-r34/passes_ab.sh OUTDIR
# OLD: a directory holding triforce/{runtime,actors,offload} of the old commit (a git worktree's
# folders linked there, plus an empty __init__.py), whose native build is its own build/native.
# Both sides time the compute roof in fp32 (what HEAD's matmul_peak_gflops does on a CPU without
# bf16 GEMM; the old code timed torch's bf16 GEMM at ~0.3 GFLOP/s here, minutes per run).
set -eu
out=$1; mkdir -p "$out"
args=(--suite passes --dtypes bf16 --contexts 1024 8000 --pass-tokens 1 2 4 8 --repeats 3
      --levels target retrieval drafter --corpus essays --bandwidth-mb 256)
bench() {
  .venv/bin/python - "$@" <<'PY'
import sys, torch
import triforce.runtime.bench.passes as passes
peak = passes.matmul_peak_gflops
passes.matmul_peak_gflops = lambda dtype, device=torch.device("cpu"), repeats=5: peak(torch.float32, device, repeats)
from triforce.runtime.cli import main
sys.exit(main(["bench"] + sys.argv[1:]))
PY
}
for round in 1 2; do
  for side in old new; do
    if [[ $side == old ]]; then pp=$OLD; else pp=; fi
    PYTHONPATH=$pp bench "${args[@]}" --out "$out/$side$round" 2>&1 | grep -E "^\| [0-9]|Error|error" | sed "s/^/$side$round /"
  done
done
