"""Does the middle level at 32K lose its agreement to the attention mass of the chunks it drops?
Teacher-forced greedy agreement (as midacc.py) of a retrieval cache plus one summary key per block of
M context tokens (the mean key and value of the block's dropped tokens, with a log(count) bias), torch
attention. python summ.py S NEW OFFSETS VARIANTS...  VARIANT = weights,budget,M (M 0: no summaries)."""
import argparse, dataclasses, math, sys, time
import triforce.runtime
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, corpus_text
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.cache_retrieval import RetrievalCache, chunk_scores, select_positions
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.speculate import Level

class Summarized(RetrievalCache):
    M = 0
    @property
    def slots(self):   # no native plan: the layers call attend() below
        raise AttributeError('slots')
    def fill_from(self, full, n):
        super().fill_from(full, n)
        whole = n // self.chunk * self.chunk; tail = n - whole
        n_chunks = (self.budget - tail) // self.chunk
        self.sk, self.sv, self.sb = [], [], []
        for layer in range(self.k.shape[0]):
            keys, values = (t[:, :, :n].float() for t in full.layer_kv(layer))
            if not self.M or n <= self.budget:
                self.sk.append(None); continue
            scores = chunk_scores(keys[:, :, :whole].to(full.k.dtype), full.last_query[layer], self.chunk)
            pos = select_positions(scores, self.chunk, n_chunks, tail, self.recent_chunks)
            B, Hkv, _, D = keys.shape
            dropped = torch.ones(B, Hkv, n, dtype=torch.bool)
            dropped.scatter_(2, pos, False)
            blocks = (n + self.M - 1) // self.M; pad = blocks * self.M - n
            w = torch.nn.functional.pad(dropped.float(), (0, pad)).view(B, Hkv, blocks, self.M)
            kk = torch.nn.functional.pad(keys, (0, 0, 0, pad)).view(B, Hkv, blocks, self.M, D)
            vv = torch.nn.functional.pad(values, (0, 0, 0, pad)).view(B, Hkv, blocks, self.M, D)
            c = w.sum(-1)                                                   # [B, Hkv, blocks]
            self.sk.append((kk * w[..., None]).sum(3) / c.clamp(min=1)[..., None])
            self.sv.append((vv * w[..., None]).sum(3) / c.clamp(min=1)[..., None])
            self.sb.append(torch.where(c > 0, c.clamp(min=1).log(), torch.full_like(c, -math.inf)))

    def attend(self, layer, q, k, v):
        keys, values = self.update(layer, q, k, v)          # [B, Hkv, S, D]
        B, H, T, D = q.shape; Hkv = keys.shape[1]; G = H // Hkv; S = keys.shape[2]
        qf = q.float().view(B, Hkv, G * T, D) * D ** -0.5
        s = qf @ keys.float().transpose(-1, -2)             # [B, Hkv, G*T, S]
        mask = torch.ones(T, S, dtype=torch.bool).tril(S - T).repeat(G, 1)
        s = s.masked_fill(~mask, -math.inf)
        vals = values.float()
        if self.sk[layer] is not None:
            ss = qf @ self.sk[layer].transpose(-1, -2) + self.sb[layer][:, :, None, :]
            s = torch.cat([s, ss], -1); vals = torch.cat([vals, self.sv[layer]], 2)
        out = torch.softmax(s, -1) @ vals                   # [B, Hkv, G*T, D]
        return out.view(B, H, T, D).transpose(1, 2).to(q.dtype)

S, NEW = int(sys.argv[1]), int(sys.argv[2])
offsets = [int(o) for o in sys.argv[3].split(",")]
variants = [v.split(",") for v in sys.argv[4:]]
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                     "--corpus", "essays", "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
models = {"same": engine.model}
for w in {v[0] for v in variants} - {"same"}:
    models[w] = lower_level_copy(engine.model, w)
text = corpus_text("essays")
edges = [0, 16, 32, 64, 128, 256, 512]
with torch.inference_mode():
    for off in offsets:
        ids = engine.tokenizer.encode(text[off:off + 8 * S])[:S]
        request = dataclasses.replace(run, temperature=0.0, max_new_tokens=NEW)
        target, seq, tl = teacher_forced(engine, request, ids)
        n = len(seq) - len(ids); targ = tl.argmax(-1)
        for w, budget, M in variants:
            t0 = time.time()
            model = models[w]
            cache = Summarized(model.cfg, target.cache.rope, 1, int(budget), 8, n + 16, engine.device, model.dtype, recent=256)
            cache.M = int(M)
            cache.fill_from(target.cache, len(ids) - 1)
            mid = Level("retrieval", model, cache, request.sampling, 512)
            mid.cached = list(target.cached[:len(ids) - 1]); mid.commit(mid.cached)
            lg = mid.feed(seq[:-1], keep_last=n)
            a = (lg.argmax(-1) == targ).float()
            parts = " ".join(f"{lo}-{hi}:{a[lo:hi].mean().item():.3f}" for lo, hi in zip(edges, edges[1:]) if lo < n)
            print(f"offset {off} {w:5s} budget {budget:>5s} M {M:>4s}: agreement {a.mean().item():.3f}  [{parts}]  ({time.time() - t0:.1f} s)", flush=True)
