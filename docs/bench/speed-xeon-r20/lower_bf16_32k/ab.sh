#!/usr/bin/env bash
# before/after of "lower levels in bf16 under an fp32 target": the modes suite with the defaults (no lower-level or gamma flags)
cd /work/main
for side in before after before after; do
  cp /tmp/r20/ab/$side/engine.py runtime/engine.py; cp /tmp/r20/ab/$side/quant.py runtime/quant.py   # before: 54461ed's two files; after: 31fd8b4's
  n=$((n+1))
  chrt -f 10 .venv/bin/triforce bench --suite modes --contexts 32000 --modes ar triforce --temperatures 0 --rope-scaling yarn:4 \
    --new-tokens 128 --repeats 2 --dtypes fp32 --threads 2 --corpus essays --out /tmp/r20/ab32/${n}_$side > /tmp/r20/ab32/${n}_$side.txt 2>&1
done
cp /tmp/r20/ab/after/engine.py runtime/engine.py; cp /tmp/r20/ab/after/quant.py runtime/quant.py
echo done > /tmp/r20/ab32/DONE
