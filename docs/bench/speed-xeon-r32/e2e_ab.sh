#!/bin/bash
# prefill end to end, the session's start (worktree at 2c242ca via the shim) against HEAD, alternating processes
cd /tmp/r32
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then P=/tmp/r32/shim; else P=; fi
    echo "== $v 8000"; PYTHONPATH=$P /work/main/.venv/bin/python /work/main/docs/bench/speed-xeon-r31/prefill/prefill_e2e.py 8000 none 3
  done
done
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then P=/tmp/r32/shim; else P=; fi
    echo "== $v 32000"; PYTHONPATH=$P /work/main/.venv/bin/python /work/main/docs/bench/speed-xeon-r31/prefill/prefill_e2e.py 32000 yarn:4 1
  done
done
