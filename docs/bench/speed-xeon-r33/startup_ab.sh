#!/bin/bash
# start-up of a 2-token triforce request: the session's start (worktree via the shim) against HEAD, alternating processes
cd /work/main
for i in 1 2 3 4 5; do
  for v in old new; do
    if [ $v = old ]; then P=/tmp/r33/shim; else P=; fi
    s=$(date +%s.%N)
    PYTHONPATH=$P .venv/bin/python -m triforce.runtime.cli generate --prompt "The capital of France is" --max-new-tokens 2 --dtype bf16 --mode triforce > /dev/null 2>&1
    e=$(date +%s.%N)
    echo "$v $(echo "$e - $s" | bc)"
  done
done
