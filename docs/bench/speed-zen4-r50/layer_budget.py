"""Which layers' retrieval costs the middle level its agreement at 32K, and would a budget shared unevenly over the
layers buy any back? Teacher-forced greedy agreement (as round 48's midacc.py) of the int4 middle level on a
retrieval cache whose budget may differ by layer (chunks of 8, the last 256 tokens kept, chosen once by the
runtime's score), through the torch path. A config is BUDGET or LAYERS:BUDGET/LAYERS:BUDGET/..., e.g. 2192,
0-1:all/2-29:2192 (every config's remaining layers get 2192).
python layer_budget.py S NEW OFFSETS CONFIG [CONFIG ...]"""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r48"))
from forcing import from_argv, by_stretch, forced, level_on, prompts
import torch
from triforce.runtime.cache_retrieval import chunk_scores, select_positions
from triforce.runtime.rope import Rope

S, NEW, engine, run, models = from_argv()
model = models["int4"]
L = engine.cfg.num_layers
CHUNK, RECENT, DEFAULT = 8, 256, 2192


def budgets(config: str) -> list[int]:
    """Per layer: the budget (a huge one for "all")."""
    out = [DEFAULT] * L
    for part in config.split("/"):
        layers, _, b = part.rpartition(":")
        lo, _, hi = layers.partition("-") if layers else ("0", "", str(L - 1))
        for layer in range(int(lo), int(hi or lo) + 1):
            out[layer] = 10 ** 9 if b == "all" else int(b)
    return out


class PerLayer:
    """A retrieval cache whose layers keep different numbers of the context's positions (torch path: no slots)."""

    def __init__(self, rope, per_layer: list[int]):
        self.rope, self.per_layer = rope, per_layer

    def fill_from(self, full, n):
        whole = n // CHUNK * CHUNK
        tail = n - whole
        self.k, self.v, self.gk, self.gv = [], [], [None] * L, [None] * L
        for layer in range(L):
            keys, values = full.layer_kv(layer)
            keys, values = keys[:, :, :n], values[:, :, :n]
            if self.per_layer[layer] >= n:
                self.k.append(keys.clone()), self.v.append(values.clone())
                continue
            sc = chunk_scores(keys[:, :, :whole], full.last_query[layer], CHUNK)
            pos = select_positions(sc, CHUNK, (self.per_layer[layer] - tail) // CHUNK, tail, RECENT // CHUNK)
            self.k.append(torch.stack([keys[0, h].index_select(0, pos[0, h]) for h in range(pos.shape[1])])[None])
            self.v.append(torch.stack([values[0, h].index_select(0, pos[0, h]) for h in range(pos.shape[1])])[None])
        self.context, self.gen = n, 0

    def begin(self, T):
        self.T = T
        self.cos, self.sin = self.rope.span(self.context + self.gen, T, 1)
        return self.cos, self.sin

    def update(self, layer, q, k, v):
        kr = Rope.rotate(k, self.cos, self.sin)
        gk = kr if self.gen == 0 else torch.cat([self.gk[layer][:, :, :self.gen], kr], 2)
        gv = v if self.gen == 0 else torch.cat([self.gv[layer][:, :, :self.gen], v], 2)
        self.gk[layer], self.gv[layer] = gk, gv
        return torch.cat([self.k[layer], gk], 2), torch.cat([self.v[layer], gv], 2)

    def end(self):
        self.gen += self.T

    def get_seq_length(self):
        return self.context + self.gen

    def commit(self, length):
        pass

    def crop(self, length):
        self.gen = length - self.context

    def reset(self):
        self.gen = 0


with torch.inference_mode():
    for off, ids in prompts(engine, S, sys.argv[3]):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        for config in sys.argv[4:]:
            per = budgets(config)
            c = PerLayer(target.cache.rope, per)
            c.fill_from(target.cache, ctx)
            hits = (level_on(model, c, request, seq, ctx).feed(seq[:-1], keep_last=n).argmax(-1) == logits.argmax(-1)).float()
            kv = sum(min(b, ctx) for b in per) / L
            print(f"offset {off} {config:28s} (mean kept {kv:7.0f}): agreement {hits.mean().item():.3f}  [{by_stretch(hits)}]", flush=True)
