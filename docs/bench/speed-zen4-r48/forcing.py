"""What round 48's teacher-forced scripts share (midacc, summ, oracle, rebuild_sim, quest_sim, skip, int8kv): the
lower suite's engine at S tokens, the essays' prompts, the target's own continuation, a middle level on a given
cache, the continuation's queries recorded, and retrieval caches whose chunks are chosen by given scores.
Imported by those scripts (not run on its own)."""
import argparse, dataclasses, sys
import triforce.runtime   # first: its allocator settings apply before torch allocates
import torch
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.bench.suites import base_run, corpus_text
from triforce.runtime.cache_full import FullCache
from triforce.runtime.cache_retrieval import RetrievalCache, chunk_scores, select_positions
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
from triforce.runtime.speculate import Level

EDGES = [0, 16, 32, 64, 128, 256, 512]   # continuation positions, for agreement by stretch


def engine_at(S: int, NEW: int):
    """The lower suite's greedy `ar` run over S tokens of the essays (yarn:4 past 8K; bf16, 2 threads) and an
    engine that keeps its prefill."""
    p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
    args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2",
                         "--corpus", "essays", "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
    torch.set_num_threads(2)
    run = base_run(args, mode="ar", temperature=0.0)
    return Engine(run, keep_prefill=True), run


def from_argv(kinds=("int4",)):
    """S and NEW from argv[1:3], the engine and run (engine_at), and the middle level's weights of each kind
    ("same": the target's own; else lower_level_copy's kinds)."""
    S, NEW = int(sys.argv[1]), int(sys.argv[2])
    engine, run = engine_at(S, NEW)
    models = {kind: engine.model if kind == "same" else lower_level_copy(engine.model, kind) for kind in kinds}
    return S, NEW, engine, run, models


def prompts(engine: Engine, S: int, offsets: str):
    """(offset, the first S tokens of the essays from that character) for each of the comma-separated offsets."""
    text = corpus_text("essays")
    for off in (int(o) for o in offsets.split(",")):
        yield off, engine.tokenizer.encode(text[off:off + 8 * S])[:S]


def forced(engine: Engine, run, ids: list[int], NEW: int, T: float = 0.0, seed: int = 0):
    """The target's own continuation at T (teacher_forced): (request, target level on its full cache of the prompt,
    prompt + continuation, the target's logits at the continuation's positions [n, V], n, ctx = len(ids) - 1)."""
    request = dataclasses.replace(run, temperature=T, max_new_tokens=NEW, seed=seed)
    target, seq, logits = teacher_forced(engine, request, ids)
    return request, target, seq, logits, len(seq) - len(ids), len(ids) - 1


def sampled(engine: Engine, run, S: int, NEW: int, offsets: str):
    """Each prompt's continuation at T = 0 and at 0.6 (top-p 0.9, seed 1): yields (offset, T, its sampling
    params, forced()'s tuple)."""
    for off, ids in prompts(engine, S, offsets):
        for T in (0.0, 0.6):
            yield off, T, SamplingParams(temperature=T, top_p=0.9), forced(engine, run, ids, NEW, T=T, seed=1)


def kept(logits: torch.Tensor, target_logits: torch.Tensor, params) -> tuple[float, float]:
    """A middle level's logits [n, V] against the target's: (greedy agreement, expected acceptance at params)."""
    agree = (logits.argmax(-1) == target_logits.argmax(-1)).float().mean().item()
    overlap = torch.minimum(probs_from_logits(target_logits, params), probs_from_logits(logits, params)).sum(-1)
    return agree, overlap.mean().item()


def level_on(model, cache, request, seq: list[int], upto: int) -> Level:
    """A middle level of `model` on `cache`, which holds seq[:upto]."""
    level = Level("retrieval", model, cache, request.sampling, 512)
    level.cached = list(seq[:upto])
    level.commit(level.cached)
    return level


def by_stretch(hits: torch.Tensor) -> str:
    """Agreement over the EDGES stretches of the continuation."""
    n = hits.shape[0]
    return " ".join(f"{lo}-{hi}:{hits[lo:hi].mean().item():.3f}" for lo, hi in zip(EDGES, EDGES[1:]) if lo < n)


class Recording(FullCache):
    """A full cache that records the queries each layer sees (torch path: no slots, so no native plan)."""
    @property
    def slots(self):
        raise AttributeError("slots")

    def update(self, layer, q, k, v):
        self.seen.setdefault(layer, []).append(q.float().clone())
        return super().update(layer, q, k, v)


def record_queries(target: Level, seq: list[int]) -> tuple[dict, torch.Tensor]:
    """Feeds the continuation to the target, whose cache then holds prompt + continuation. Returns each layer's
    queries [B, H, n, D] (index i: the input at position ctx + i) and the prompt's last query (put back)."""
    cache = target.cache
    prompt_query = cache.last_query.clone()
    kind, cache.__class__, cache.seen = cache.__class__, Recording, {}
    try:
        target.feed(seq[:-1], keep_last=1)
    finally:
        cache.__class__ = kind
    cache.last_query.copy_(prompt_query)
    return {layer: torch.cat(qs, 2) for layer, qs in cache.seen.items()}, prompt_query


def recorded(engine: Engine, run, S: int, NEW: int, offsets: str):
    """Each prompt's greedy continuation with its queries recorded (record_queries; the target's cache then
    holds prompt + continuation): yields (offset, request, target, seq, the target's tokens [n], n, ctx,
    queries, the prompt's last query)."""
    for off, ids in prompts(engine, S, offsets):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        queries, prompt_query = record_queries(target, seq)
        yield off, request, target, seq, logits.argmax(-1), n, ctx, queries, prompt_query


class Chosen(RetrievalCache):
    """A retrieval cache whose chunks are chosen by `scores` (per layer [B, Hkv, C]), or, None, by the full
    cache's last query as the runtime's own."""
    scores = None

    def fill_from(self, full, n):
        whole = n // self.chunk * self.chunk
        tail = n - whole
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


def mass_scores(full, queries: dict, n: int, chunk: int, which: list[int]) -> list[torch.Tensor]:
    """Per layer [B, Hkv, C]: the most softmax mass any of the chosen queries puts on each whole chunk of the
    full cache's first n positions."""
    out = []
    whole = n // chunk * chunk
    for layer in range(full.k.shape[0]):
        q = queries[layer][:, :, which]                      # [B, H, Q, D]
        keys = full.k[layer, :, :, :n].float()               # [B, Hkv, n, D]
        B, H, Q, D = q.shape
        Hkv = keys.shape[1]
        G = H // Hkv
        s = (q.reshape(B, Hkv, G * Q, D) * D ** -0.5) @ keys.transpose(-1, -2)   # [B, Hkv, GQ, n]
        p = torch.softmax(s, -1)[..., :whole].reshape(B, Hkv, G * Q, whole // chunk, chunk).sum(-1)
        out.append(p.amax(2))
    return out
