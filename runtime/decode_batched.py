"""Batched decoding within one replica: B sequences decoded together, any mode, lossless.

Each sequence runs the *unchanged* single-sequence code (Engine.generate: prefill, SpecDecoder,
per-sequence acceptance with its own seeded generator, rebuild policy) in its own thread. Only
the forward passes are shared: a sequence's model call becomes a request to the Batcher, which
waits until every live sequence is waiting on a pass, then runs the model's own forward once for
all requests on the same weights (with `--middle-weights same` the middle level and the target
share the target's weights, so their passes pack together too):

    requests   seq 0: 1 token  -> its FullCache         (target verifying)
               seq 1: 7 tokens -> its RetrievalCache    (middle level)
               seq 2: 1 token  -> its FullCache
    packed     tokens [1, 9] through model(tokens, PackedCache(...)): embedding, norms, projections
               and the MLP run once over all 9 rows (the weights are read once: that is the
               batching gain); attention runs per sequence on that sequence's own cache, exactly
               as it would alone (runtime/cache_packed.py).

Ragged lengths need no padding and no masks, so a sequence's tokens depend only on its own
prompt and seed (greedy batched == one at a time, and a seeded record gives the same text
whatever it is batched with).

Sequences need different numbers of rounds (each accepts differently), so a fixed batch ends with
its last sequences decoding alone (at 7K, 4 sequences of 64 tokens took 11-20 target rounds each
and shared a target pass 2.8 at a time). With more prompts than `slots`, a finished sequence's
slot takes the next prompt (continuous batching): its prefill chunks pack with the others' passes.
"""
from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass, field

import torch

from triforce.runtime.cache_packed import PackedCache
from triforce.runtime.quant import weight_bytes


@dataclass(eq=False)
class Request:
    model: torch.nn.Module
    tokens: torch.Tensor              # [1, T]
    cache: object                     # the sequence's KVCache for this level
    last_only: int                    # logits rows wanted: the last n positions (0/False = all)
    logits: torch.Tensor | None = None
    seconds: float = 0.0              # the packed pass's own wall time (not the wait for others' passes)
    error: BaseException | None = None
    done: bool = False


def packed_pass(model, requests: list[Request]) -> list[torch.Tensor]:
    """One pass of the model's own forward over several sequences' new tokens, each sequence with
    its own cache (runtime/cache_packed.py). Returns each request's logits [1, R_i, V] float32:
    its last_only rows (all T_i when 0)."""
    sizes = [r.tokens.shape[1] for r in requests]
    wanted = [min(int(r.last_only) or n, n) for r, n in zip(requests, sizes)]            # R_i
    cache = PackedCache([r.cache for r in requests], sizes)
    tokens = torch.cat([r.tokens for r in requests], dim=1)                                # [1, ΣT]
    logits = model(tokens, cache, last_only=cache.rows(wanted, model.device))              # [1, R, V]
    return list(logits.split(wanted, dim=1))


def next_group(pending: list[Request], cost) -> list[Request]:
    """The requests to run next: those on the weights whose pass reads the fewest bytes, cost(model)
    (quant.weight_bytes: a quantized middle level is cheaper than the target it copies, though both
    have the target's shape). Holding the dearer weights' requests lets sequences that drifted
    apart gather again at the target, whose passes are the ones worth packing."""
    groups: dict[int, list[Request]] = {}
    for r in pending:
        groups.setdefault(id(r.model), []).append(r)
    return min(groups.values(), key=lambda g: cost(g[0].model))


class Batcher:
    """Collects the forward passes of `live` sequence threads; when all of them wait, runs the
    requests on the cheapest weights waiting as one packed pass (in the thread of
    run_until_done), wakes those sequences, and repeats until every sequence has finished
    (next_group: cheapest weights first, so the target's passes pack every sequence)."""

    def __init__(self, live: int):
        self.live, self.pending, self.cond = live, [], threading.Condition()
        self.passes: dict[int, int] = {}       # id(model) -> packed passes run on those weights
        self.packed_rows: dict[int, int] = {}  # id(model) -> sequence-passes they served
        self._bytes: dict[int, int] = {}       # id(model) -> weight_bytes(model), asked every pass

    def weight_bytes(self, model) -> int:
        if id(model) not in self._bytes:
            self._bytes[id(model)] = weight_bytes(model)
        return self._bytes[id(model)]

    def forward(self, model, tokens: torch.Tensor, cache, last_only: bool) -> Request:
        """Called from a sequence thread in place of model(tokens, cache, last_only): the request,
        done (its logits, and the seconds of the packed pass that served it)."""
        request = Request(model, tokens, cache, last_only)
        with self.cond:
            self.pending.append(request)
            self.cond.notify_all()
            self.cond.wait_for(lambda: request.done)
        if request.error is not None:
            raise request.error
        return request

    def finished(self) -> None:
        with self.cond:
            self.live -= 1
            self.cond.notify_all()

    def run_until_done(self) -> None:
        with self.cond:
            while True:
                self.cond.wait_for(lambda: self.live == 0 or len(self.pending) == self.live)
                if self.live == 0:
                    return
                group = next_group(self.pending, self.weight_bytes)
                began = time.perf_counter()
                try:
                    logits = packed_pass(group[0].model, group)
                    seconds = time.perf_counter() - began
                    for r, rows in zip(group, logits):
                        r.logits, r.seconds = rows, seconds
                except (RuntimeError, ValueError) as e:   # e.g. a cache's capacity: fail these sequences
                    for r in group:
                        r.error = e
                key = id(group[0].model)
                self.passes[key] = self.passes.get(key, 0) + 1
                self.packed_rows[key] = self.packed_rows.get(key, 0) + len(group)
                for r in group:
                    r.done = True
                    self.pending.remove(r)
                self.cond.notify_all()


class SequenceModel:
    """Stands in for a model inside one sequence's levels: calls go to the batcher. last_seconds:
    the wall time of the packed pass that served the last call, what the level's pass cost is
    (speculate.Level.feed, gamma.pass_seconds); the call itself also waited for other sequences'
    passes on other weights, which a pass of this level does not cost."""

    def __init__(self, model, batcher: Batcher):
        self._model, self._batcher = model, batcher
        self.last_seconds: float | None = None

    def __getattr__(self, name):
        return getattr(self._model, name)

    def __call__(self, tokens: torch.Tensor, cache, last_only: bool = False) -> torch.Tensor:
        request = self._batcher.forward(self._model, tokens, cache, last_only)
        self.last_seconds = request.seconds
        return request.logits


@dataclass
class BatchOutcome:
    results: list = field(default_factory=list)   # per sequence: Result, or the exception it raised
    passes: dict = field(default_factory=dict)    # "target" | "drafter" -> packed passes run on those weights
    packed_rows: dict = field(default_factory=dict)  # the same keys -> sequence-passes they served


def generate_batch(engine, prompts: list[list[int]], runs: list, slots: int | None = None) -> BatchOutcome:
    """Engine.generate for several sequences at once (each with its own RunConfig): same tokens
    as one at a time, with the model passes packed across sequences. At most `slots` sequences
    decode together (None: all of them); when one finishes, its slot takes the next prompt
    (continuous batching), so passes stay full while sequences that need more rounds finish."""
    from triforce.runtime.engine import DRAFTER_MODES
    for run in runs:   # load the drafter and build lower-level copies here, not inside a sequence thread
        if run.mode in DRAFTER_MODES and engine.drafter is None:
            engine.drafter = engine.load_drafter(run)
        if run.mode in ("retrieval", "triforce"):
            engine.level_model(run, "middle")
        if run.mode in DRAFTER_MODES:
            engine.level_model(run, "drafter")
    lower = engine.__dict__.get("_level_models", {})
    workers = min(len(prompts), slots or len(prompts))
    batcher = Batcher(workers)
    outcome = BatchOutcome(results=[None] * len(prompts))
    batch_costs: dict = {}   # --gamma auto's pass costs, shared by this batch's sequences only (not stored: a
                             # packed pass costs more than a lone one, and later lone requests would read them)
    todo = iter(range(len(prompts)))   # the next prompt for a free slot (next() is atomic under the GIL)

    def one(i: int) -> None:
        seq_engine = copy.copy(engine)   # shares weights and tokenizer; its models go through the batcher
        seq_engine.keep_prefill = False
        seq_engine.pass_costs, seq_engine.stored_costs = batch_costs, False   # packed passes' costs: this batch's own
        seq_engine.model = SequenceModel(engine.model, batcher)
        seq_engine.drafter = SequenceModel(engine.drafter, batcher) if engine.drafter is not None else None
        seq_engine._level_models = {key: SequenceModel(m, batcher) for key, m in lower.items()}
        try:
            outcome.results[i] = seq_engine.generate(prompts[i], runs[i])
        except Exception as e:   # noqa: BLE001 -- handed back as this sequence's outcome, not swallowed
            outcome.results[i] = e

    def slot() -> None:
        try:
            for i in todo:
                one(i)
        finally:
            batcher.finished()

    threads = [threading.Thread(target=slot, name=f"triforce-slot-{n}", daemon=True) for n in range(workers)]
    for t in threads:
        t.start()
    batcher.run_until_done()
    for t in threads:
        t.join()
    names = {id(m): f"{role}-{weights}" + (f"-vocab{vocab}" if vocab else "")
             for (role, weights, vocab, *_), m in lower.items()}   # key: Engine.level_model's
    names.update({id(engine.model): "target", id(engine.drafter): "drafter"})
    outcome.passes = {names[k]: n for k, n in batcher.passes.items()}
    outcome.packed_rows = {names[k]: n for k, n in batcher.packed_rows.items()}
    return outcome
