# Round 37: calls a variant build (VARDIR /tmp/r37/var, built by attention_variants.py) on 30 layers of K/V for 8 s, for
#   perf record -F 2000 -o OUT python profile_decode_dram.py base 8192 1; perf annotate -i OUT -s "(anonymous namespace)::run_item_avx2<c10::BFloat16>"
import sys, glob, importlib.util, torch, time
n, S, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
so = glob.glob(f"/tmp/r37/var/b_{n}/{n}*.so")[0]
spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.set_num_threads(2)
q = torch.randn(1, 9, T, 64).bfloat16(); K = torch.randn(30, 1, 3, S, 64).bfloat16(); V = torch.randn(30, 1, 3, S, 64).bfloat16()
t0 = time.time(); calls = 0
while time.time() - t0 < 8:
    for L in range(30): m.attend(q, K[L], V[L], 0.125); calls += 1
print("ms per call", 8000 / calls)
