"""What oracle.py, rebuild_sim.py and quest_sim.py share: a full cache that records the queries it sees,
a retrieval cache whose chunks are chosen by given scores, and the attention-mass scores.
Imported by those scripts (not run on its own)."""
import torch
from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_retrieval import RetrievalCache, chunk_scores, select_positions


class Recording(FullCache):
    @property
    def slots(self):
        raise AttributeError("slots")
    def update(self, layer, q, k, v):
        self.seen.setdefault(layer, []).append(q.float().clone())
        return super().update(layer, q, k, v)

class Chosen(RetrievalCache):
    scores = None   # per layer [B, Hkv, C] or None: the last query's
    def fill_from(self, full, n):
        whole = n // self.chunk * self.chunk; tail = n - whole
        n_chunks = (self.budget - tail) // self.chunk
        for layer in range(self.k.shape[0]):
            keys, values = (t[:, :, :n] for t in full.layer_kv(layer))
            sc = self.scores[layer] if self.scores is not None else chunk_scores(keys[:, :, :whole], full.last_query[layer], self.chunk)
            pos = select_positions(sc, self.chunk, n_chunks, tail, self.recent_chunks)
            kept = pos.shape[-1]
            for b in range(pos.shape[0]):
                for h in range(pos.shape[1]):
                    self.k[layer, b, h, :kept] = keys[b, h].index_select(0, pos[b, h])
                    self.v[layer, b, h, :kept] = values[b, h].index_select(0, pos[b, h])
        self.selected = self.length = kept
        self.context = n

def mass_scores(full, queries, n, chunk, which):
    """per layer [B, Hkv, C]: max over the chosen queries of the softmax mass on each whole chunk."""
    out = []
    whole = n // chunk * chunk
    for layer in range(full.k.shape[0]):
        q = queries[layer][:, :, which]                      # [B, H, Q, D]
        keys = full.k[layer, :, :, :n].float()               # [B, Hkv, n, D]
        B, H, Q, D = q.shape; Hkv = keys.shape[1]; G = H // Hkv
        s = (q.reshape(B, Hkv, G * Q, D) * D ** -0.5) @ keys.transpose(-1, -2)   # [B, Hkv, GQ, n] (future keys not included)
        p = torch.softmax(s, -1)[..., :whole].reshape(B, Hkv, G * Q, whole // chunk, chunk).sum(-1)
        out.append(p.amax(2))
    return out

