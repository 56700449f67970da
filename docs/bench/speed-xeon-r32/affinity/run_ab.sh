#!/bin/bash
cd /tmp/r32/aff
for i in 1 2; do
  for v in old new; do
    if [ $v = old ]; then P=/tmp/r32/shim; else P=; fi
    rm -rf out_$v$i.jsonl out_$v$i.report
    /usr/bin/time -f "$v$i wall %e s" env PYTHONPATH=$P /work/main/.venv/bin/python -m triforce.runtime.cli batch --input jobs.jsonl --output out_$v$i.jsonl --replicas 2 --prefix-cache --mode ar --dtype bf16 --max-new-tokens 16 2>&1 | grep -E "wall|records to run" 
    /work/main/.venv/bin/python -c "
import json; rs=[json.loads(l) for l in open('out_$v$i.jsonl')]
print('$v$i', sum(r['stats']['prefill_s'] for r in rs if 'stats' in r and r['stats']), [ (r['id'], r['stats'].get('prefill_reused'), round(r['stats']['prefill_s'],2)) for r in rs])"
  done
done
