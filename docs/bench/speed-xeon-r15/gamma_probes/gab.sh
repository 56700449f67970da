source /work/main/.venv/bin/activate
cd /tmp/r15
for i in 1 2; do
for v in old new; do
  if [ $v = old ]; then P=1,2,4,8,16; else P=; fi
  PROBE=$P chrt -f 10 python gwrap.py bench --suite modes --contexts 7168 --modes ar triforce --temperatures 0 0.6 --new-tokens 128 \
    --repeats 3 --dtypes bf16 --threads 2 --corpus essays --middle-weights int4 --draft-weights int4 \
    --draft-vocab 4096 --gamma auto --out gab/${v}_$i > gab/${v}_$i.log 2>&1
done; done
echo done > gab/done
