#!/usr/bin/env bash
# Round 24's GPU call (../shared/GPU.md items 1-5), one device call, results under $OUT:
#   bash docs/bench/gpu-r24/make_old.sh   # here, first
#   run(command="bash docs/bench/gpu-r24/gpu.sh", carry=[".ab"], kind="nvidia-h200")
# "new" is this tree; "old" (.ab/) the same with round 20's attention mask and strided KV copy.
# Random weights of the paper's shapes: timing only. Each step has its own limit.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
W=/tmp/gpu-work; mkdir -p $W /tmp/site_new/triforce
for d in runtime actors offload; do ln -sfn "$PWD/$d" /tmp/site_new/triforce/$d; done
ln -sfn "$PWD/.ab" /tmp/site_old
export PYTHONUNBUFFERED=1 TRIFORCE_CACHE=/tmp/tf-cache
R=$W/results; mkdir -p $R   # every JSON, re-tarred into $OUT/results.tar after each step ($OUT returns at most 8 files)
save() { cp "$@" $R/ 2>/dev/null; tar -cf "$OUT/results.tar" -C $W results; }
step() { local limit=$1 name=$2; shift 2; echo "=== $name ($(date +%T), limit ${limit}s)"; local t0=$SECONDS
  timeout "$limit" "$@"; echo "=== $name: rc $? in $((SECONDS - t0)) s"; }
printf '#!/usr/bin/env bash\nv=$1; shift; PYTHONPATH=/tmp/site_$v exec python3 -m triforce.runtime.cli "$@"\n' > $W/tf
chmod +x $W/tf   # `triforce` of side new|old: a command that timeout can run
exec > >(tee "$OUT/log.txt") 2>&1
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__)"; } 2>&1
M7=${M7:-configs/models/llama2-7b-128k.json}; M68=${M68:-configs/models/llama-68m.json}   # overridable: a CPU dry run
M="--model $M7 --draft-model $M68"
GIB=$(python3 -c "import torch; print(torch.cuda.get_device_properties(0).total_memory >> 30 if torch.cuda.is_available() else 0)")
CONTEXTS=${CONTEXTS:-$([ "$GIB" -ge 120 ] && echo "32000 120000" || echo "32000 65536")}
echo "GPU memory ${GIB} GiB: contexts $CONTEXTS"
step 150 "1. pytest -m gpu" env PYTHONPATH=/tmp/site_new python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py
step 170 "2. passes new, with CUDA graphs" $W/tf new bench --suite passes $M --dtypes bf16 --contexts $CONTEXTS \
  --pass-tokens 1 2 4 8 16 --repeats 5 --budget 4096 ${GRAPH---cuda-graph} --out $W/passes_new
cp $W/passes_new/passes.json $W/passes_new.json 2>/dev/null; save $W/passes_new.json
step 80 "3. passes old (boolean mask for T > 1)" $W/tf old bench --suite passes $M --dtypes bf16 --contexts $CONTEXTS \
  --levels target retrieval --pass-tokens 1 2 8 16 --repeats 5 --budget 4096 --out $W/passes_old
cp $W/passes_old/passes.json $W/passes_old.json 2>/dev/null; save $W/passes_old.json
python3 -c "import random; random.seed(0); print(' '.join(f't{random.randrange(32000)}' for _ in range(${PROMPT:-32000})))" > $W/prompt.txt
T7=$(PYTHONPATH=/tmp/site_new python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('$M7'))" | tail -1)
T68=$(PYTHONPATH=/tmp/site_new python3 -c "from triforce.runtime.bench.random_weights import model_arg; print(model_arg('$M68'))" | tail -1)
G="--model $T7 --draft-model $T68 --dtype bf16 --prompt-file $W/prompt.txt --max-new-tokens 64 --retrieval-budget 4096"
step 45 "4a. generate 32K ar" $W/tf new generate $G --mode ar --json $R/gen_ar.json; save
step 60 "4b. generate 32K triforce, graphs" $W/tf new generate $G --mode triforce --gamma1 2 --gamma2 6 --json $R/gen_tf_graphs.json; save
step 60 "4c. generate 32K triforce, eager" $W/tf new generate $G --mode triforce --gamma1 2 --gamma2 6 --no-cuda-graphs --json $R/gen_tf_eager.json; save
step 20 "5. plan 8K" $W/tf new plan $M --dtype bf16 --context 8200 --json $R/plan_8k.json; save
for v in new old; do
  step $([ $v = new ] && echo 50 || echo 75) "6. offload ar $v" $W/tf $v bench --suite offload $M --dtypes bf16 --modes ar --contexts 8192 --new-tokens 4 \
    --repeats 1 --budget 1024 --out $W/offload_$v
  cp $W/offload_$v/offload.json $W/offload_$v.json 2>/dev/null; save $W/offload_$v.json
done
echo "=== done $(date +%T)"
