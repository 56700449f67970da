#!/usr/bin/env bash
# Round 21: bf16 passes before (a3f3e6d) and after this round's C++ changes, alternated: the old
# tree runs from a worktree through PYTHONPATH with its own native build dir. Set-up:
#   git worktree add /tmp/wt_old a3f3e6d; mkdir -p /tmp/site_r21old/triforce
#   for d in runtime actors offload; do ln -s /tmp/wt_old/$d /tmp/site_r21old/triforce/$d; done
#   PYTHONPATH=/tmp/site_r21old TRIFORCE_NATIVE_DIR=/tmp/wt_old_build .venv/bin/python -m triforce.runtime.native build
cd /work/main
CMD="triforce.runtime.cli bench --suite passes --contexts 8000 32000 --rope-scaling yarn:4 --pass-tokens 1 4 8 --repeats 7 --dtypes bf16 --threads 2 --corpus essays --budget 1024 --middle-weights int4 --levels target"
n=0
for side in old new old new; do
  n=$((n+1))
  if [ $side = old ]; then env="PYTHONPATH=/tmp/site_r21old TRIFORCE_NATIVE_DIR=/tmp/wt_old_build"; else env=""; fi
  env $env chrt -f 10 .venv/bin/python -m $CMD --out /tmp/r21/bf16chk/${n}_$side > /tmp/r21/bf16chk/${n}_$side.txt 2>&1
done
echo done > /tmp/r21/bf16chk/DONE
