# Round 37: row independence and accuracy of a variant build (attention_variants.py build NAME, VARDIR=/tmp/r37/var):
# each row of a T-token pass must equal, bitwise, the 1-token pass over its visible prefix; and the
# output must match an fp64 reference. Usage: python rows_check.py NAME (prints "bad 0" when all hold).
import sys, glob, importlib.util, torch, math
n = sys.argv[1]
so = glob.glob(f"/tmp/r37/var/b_{n}/{n}*.so")[0]
spec = importlib.util.spec_from_file_location(n, so); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
torch.set_num_threads(2)
torch.manual_seed(0)
bad = 0
for dtype in (torch.bfloat16, torch.float32):
    for S in (37, 700, 1500, 2600):
        for T in (2, 3, 4, 5, 6, 8, 11, 16):
            q = torch.randn(1, 9, T, 64).to(dtype); K = torch.randn(1, 3, S, 64).to(dtype); V = torch.randn(1, 3, S, 64).to(dtype)
            o = m.attend(q, K, V, 0.125).transpose(1, 2)  # [B, H, T, D]
            # fp64 reference, bottom-right causal
            qf, kf, vf = q.double().view(1, 3, 3, T, 64), K.double()[:, :, None], V.double()[:, :, None]
            s = torch.einsum('bhgtd,bhxsd->bhgts', qf, kf) * 0.125
            mask = torch.arange(S)[None, :] > (S - T + torch.arange(T))[:, None]
            s = s.masked_fill(mask, float('-inf'))
            ref = torch.einsum('bhgts,bhxsd->bhgtd', s.softmax(-1), vf).reshape(1, 9, T, 64)
            err = (o.double() - ref).abs().max().item()
            for t in range(T):
                o1 = m.attend(q[:, :, t:t + 1].contiguous(), K[:, :, :S - T + t + 1].contiguous(), V[:, :, :S - T + t + 1].contiguous(), 0.125).transpose(1, 2)
                if not torch.equal(o1[:, :, 0], o[:, :, t]):
                    bad += 1
                    print("row mismatch", dtype, S, T, t, (o1[:, :, 0].float() - o[:, :, t].float()).abs().max().item())
            tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
            if err > tol: bad += 1; print("ref err", dtype, S, T, err)
print("bad", bad)
