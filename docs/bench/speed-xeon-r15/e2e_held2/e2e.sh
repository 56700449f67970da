source /work/main/.venv/bin/activate
cd /tmp/r15
for i in 1 2; do for v in old new; do
  if [ $v = old ]; then export TF_SCRATCH_SPLIT16=1; else unset TF_SCRATCH_SPLIT16; fi
  chrt -f 10 triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 --new-tokens 128 \
    --repeats 3 --dtypes bf16 --threads 2 --corpus essays --middle-weights int4 --draft-weights int4 \
    --draft-vocab 4096 --gamma auto --out e2e/m7k_${v}_$i > e2e/m7k_${v}_$i.log 2>&1
done; done
for i in 1 2; do for v in old new; do
  if [ $v = old ]; then export TF_SCRATCH_SPLIT16=1; else unset TF_SCRATCH_SPLIT16; fi
  chrt -f 10 triforce bench --suite modes --contexts 32000 --rope-scaling yarn:4 --budget 1024 --modes ar triforce \
    --temperatures 0 0.6 --new-tokens 128 --repeats 2 --dtypes bf16 --threads 2 --corpus essays \
    --middle-weights int4 --draft-weights int4 --draft-vocab 4096 --gamma auto --out e2e/m32k_${v}_$i > e2e/m32k_${v}_$i.log 2>&1
done; done
echo done > e2e/done
