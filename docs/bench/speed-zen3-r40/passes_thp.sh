# Round 40: the passes suite at 8K (target and middle level, T = 1 and 3), THP_MEM_ALLOC_ENABLE=0 against 1, alternated 3 times
#   bash docs/bench/speed-zen3-r40/passes_thp.sh OUTDIR > log
set -u
out=$1; mkdir -p "$out"
for i in 1 2 3; do for thp in 0 1; do
  THP_MEM_ALLOC_ENABLE=$thp timeout 900 .venv/bin/triforce bench --suite passes --dtypes bf16 --threads 2 --contexts 8000 --pass-tokens 1 3 --repeats 5 --levels target retrieval --corpus essays --out $out/$thp.$i > $out/$thp.$i.log 2>&1
  echo "THP=$thp run $i"; grep '^| 8000' $out/$thp.$i.log | awk '!seen[$0]++'
done; done
