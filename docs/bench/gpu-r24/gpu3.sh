#!/usr/bin/env bash
# Round 24's third GPU call: why an `ar` pass cost 87.5 ms in call 1's decode loop (32K, 7B shape,
# random bf16) against 30 ms in the passes suite at a fixed key length. Three sides, same request:
#   old      this tree with attend's T = 1 branch through plain SDPA put back
#   nocudnn  old with torch.backends.cuda.enable_cudnn_sdp(False) (a sitecustomize.py on the path)
#   new      this tree: every T through the bottom-right CausalBias (flash)
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"; W=/tmp/gpu-work; mkdir -p $W
for v in new old nocudnn; do mkdir -p /tmp/site_$v/triforce; done
for d in actors offload; do for v in new old nocudnn; do ln -sfn "$PWD/$d" /tmp/site_$v/triforce/$d; done; done
ln -sfn "$PWD/runtime" /tmp/site_new/triforce/runtime
cp -r runtime /tmp/site_old/triforce/runtime
python3 - <<'PY'
from pathlib import Path
p = Path("/tmp/site_old/triforce/runtime/attention.py")
s = p.read_text()
old = "        return _attend_sdpa_split(q, k, v)\n    return _attend_sdpa_lower_right(q, k, v)\n"
assert s.count(old) == 1
p.write_text(s.replace(old, "        return _attend_sdpa_split(q, k, v)\n    if q.shape[2] > 1:\n        return _attend_sdpa_lower_right(q, k, v)\n    return _attend_sdpa(q, k, v)\n"))
PY
ln -sfn /tmp/site_old/triforce/runtime /tmp/site_nocudnn/triforce/runtime
echo "import torch; torch.backends.cuda.enable_cudnn_sdp(False)" > /tmp/site_nocudnn/sitecustomize.py
export PYTHONUNBUFFERED=1 TRIFORCE_CACHE=/tmp/tf-cache
exec > >(tee "$OUT/log3.txt") 2>&1
python3 -c "import torch; print(torch.__version__, 'cudnn sdp enabled:', torch.backends.cuda.cudnn_sdp_enabled())"
M=$(PYTHONPATH=/tmp/site_new python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('${MODEL:-configs/models/llama2-7b-128k.json}'))" | tail -1)
python3 -c "import random; random.seed(0); print(' '.join(f't{random.randrange(32000)}' for _ in range(${PROMPT:-32000})))" > $W/prompt.txt
for v in old nocudnn new; do
  echo "=== $v $(date +%T)"
  PYTHONPATH=/tmp/site_$v timeout 60 python3 -m triforce.runtime.cli generate --model $M --dtype bf16 --prompt-file $W/prompt.txt \
    --max-new-tokens 48 --mode ar --json $OUT/ar_$v.json 2>&1 | grep -v prefill | tail -2
done
echo "=== done $(date +%T)"
