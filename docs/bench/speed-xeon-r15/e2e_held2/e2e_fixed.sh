source /work/main/.venv/bin/activate
cd /tmp/r15
while [ ! -f e2e/done ]; do sleep 5; done
for i in 1 2; do for v in old new; do
  if [ $v = old ]; then export TF_SCRATCH_SPLIT16=1; else unset TF_SCRATCH_SPLIT16; fi
  chrt -f 10 triforce bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 --new-tokens 128 \
    --repeats 3 --dtypes bf16 --threads 2 --corpus essays --middle-weights int4 --draft-weights int4 \
    --draft-vocab 4096 --budget 1024 --gamma1 2 --gamma2 6 --out e2e/f7k_${v}_$i > e2e/f7k_${v}_$i.log 2>&1
done; done
echo done > e2e/done_fixed
