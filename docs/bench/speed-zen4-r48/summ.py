"""Does the middle level at 32K lose its agreement to the attention mass of the chunks it drops?
Teacher-forced greedy agreement (as midacc.py) of a retrieval cache plus one summary key per block of
M context tokens (the mean key and value of the block's dropped tokens, with a log(count) bias), torch
attention. python summ.py S NEW OFFSETS VARIANTS...  VARIANT = weights,budget,M (M 0: no summaries)."""
import math, os, sys, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forcing import by_stretch, forced, from_argv, level_on, prompts
import torch
from triforce.runtime.cache_retrieval import RetrievalCache, chunk_scores, select_positions


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

variants = [v.split(",") for v in sys.argv[4:]]
S, NEW, engine, run, models = from_argv({v[0] for v in variants})
with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        for w, budget, M in variants:
            t0 = time.time()
            model = models[w]
            cache = Summarized(model.cfg, target.cache.rope, 1, int(budget), 8, n + 16, engine.device, model.dtype, recent=256)
            cache.M = int(M)
            cache.fill_from(target.cache, ctx)
            hits = (level_on(model, cache, request, seq, ctx).feed(seq[:-1], keep_last=n).argmax(-1) == logits.argmax(-1)).float()
            print(f"offset {off} {w:5s} budget {budget:>5s} M {M:>4s}: agreement {hits.mean().item():.3f}  [{by_stretch(hits)}]  "
                  f"({time.time() - t0:.1f} s)", flush=True)
