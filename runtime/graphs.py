"""A level's small passes replayed from CUDA graphs: no Python and no kernel launches per pass.

On a GPU the drafter's and the middle level's passes are bound by launches from Python, not by
memory: on an H200 (round 20, BENCHMARKS "GPU") the 68M drafter's pass took 1.5 ms against a
0.02 ms roofline and the middle level's 17-20 ms against 3.5 ms; replayed from captured graphs,
0.23 and 6.5 ms. A graph replays the addresses and shapes it was captured with, so what changes from
one pass to the next lives in tensors at fixed addresses that the graph reads:

    tokens   [B, T]      the new tokens
    cos/sin  [B, T, D]   their RoPE tables (copied from the cache's own begin(T))
    index    [T]         the slots where their K/V go in the cache's buffers [L, B, Hkv, capacity, D]

and attention reads the whole buffer, each query seeing the slots up to its own (a mask
[T, capacity], built from `index` inside the graph) instead of a slice whose length would change.
The cache keeps its bookkeeping in Python, as in an eager pass: begin(T) evicts and checks the
capacity, end() counts the tokens. Any cache with slots() (full, retrieval, streaming) qualifies.

One graph per (T, rows) a level asks for at least twice (a length seen once, such as a catch-up
after a rejection, runs eagerly), up to MAX_TOKENS tokens (prefill chunks run eagerly); a level's
graphs share one memory pool. Where there is no CUDA, or capture=False, the same static pass runs
eagerly: that is how the CPU tests check it.

The full target's passes are bound by launches too (an eager 1-token pass of Llama-2-7B took 25-31
ms at 32K-120K on an H200, replayed 11.9-23.7; BENCHMARKS "GPU", round 33), but only its 1-token
passes (`ar`'s decode) replay whole (TARGET_WHOLE_TOKENS, for every level on the target's weights:
the middle level and StreamingLLM too). Under a [T, capacity] mask with T > 1
SDPA picks a kernel that splits the work over queries only: 0.67-0.73 ms a layer at 32K and
2.4-2.7 ms at 120K, against 0.14 and 0.51 for the flash kernel over the filled length (round 33).
So their longer passes replay in pieces (PiecewisePass): a graph for each stretch between two
attentions, and each layer's attention run eagerly between them, over [0, start + T) as the
model's own pass runs it: the same kernels, so the same output, without the launches around them.
A layer of the target's weights keeps the GPU busy longer (0.1 ms for its weights alone) than
Python takes to launch its attention; the 68M drafter's does not (its whole replayed passes take
0.3 ms; not measured in pieces), so its passes replay whole.
"""
from __future__ import annotations

import sys
from collections import Counter

import torch

from triforce.runtime.attention import attend, attend_masked
from triforce.runtime.rope import Rope

MAX_TOKENS = 16           # longer passes (prefill chunks) run eagerly
TARGET_WHOLE_TOKENS = 1   # a level on the target's weights replays longer passes in pieces (the module doc)
CAPTURE_AT = 2            # a (T, rows) is captured the second time it is asked for


def whole_tokens(role: str) -> int:
    """A level's passes of up to this many tokens replay whole, longer ones in pieces: 1 for a level
    on the target's weights (role "target": the target, the middle level, StreamingLLM), MAX_TOKENS
    for the drafter (the module doc)."""
    return MAX_TOKENS if role == "drafter" else TARGET_WHOLE_TOKENS


def level_forward(model, cache, enabled: bool, role: str):
    """The forward a level whose weights are `role`'s (target | drafter) runs with: its passes of up
    to MAX_TOKENS tokens replayed from CUDA graphs (whole_tokens) where `enabled`
    (RunConfig.cuda_graphs), the model is on CUDA and its weights are resident; else the model
    itself. The local engine and the Ray coordinator (its drafter) both ask here."""
    if enabled and model.device.type == "cuda" and replayable(model):
        return GraphedForward(model, cache, whole_tokens=whole_tokens(role))
    return model


def replayable(model) -> bool:
    """Whether a model's passes may be captured: its layers compute on resident weights. Streamed
    weights (offload/weights.py) come with copies on other streams ordered by Python-side state
    that a replay would not repeat."""
    from triforce.runtime.model import DecoderLayer
    return all(type(layer) is DecoderLayer for layer in model.model.layers)


class StaticSlots:
    """The cache a captured pass runs against: one cache's slot buffers, with the pass's positions
    in tensors at fixed addresses (the module doc). begin/attend/end as runtime/cache.py's
    interface (attend in place of update, as the packed cache)."""

    def __init__(self, k: torch.Tensor, v: torch.Tensor, last_query: torch.Tensor | None,
                 cos: torch.Tensor, sin: torch.Tensor):
        self.k, self.v, self.last_query = k, v, last_query             # [L, B, Hkv, capacity, D]; [L, B, H, D]
        self.cos = torch.empty(cos.shape, dtype=cos.dtype, device=cos.device)   # [B, T, D]
        self.sin = torch.empty(sin.shape, dtype=sin.dtype, device=sin.device)
        self.index = torch.zeros(cos.shape[1], dtype=torch.long, device=k.device)    # [T]: the slots
        self.key_slots = torch.arange(k.shape[3], device=k.device)                  # [capacity]
        self.visible = None
        self.seen = 0   # keys [0, seen) the pass in flight attends to (eager attention between pieces reads it)

    def load(self, cos: torch.Tensor, sin: torch.Tensor, start: int) -> None:
        """The pass in flight's tables and slots [start, start + T) (outside the graph: copies into its inputs)."""
        self.cos.copy_(cos)
        self.sin.copy_(sin)
        self.index.copy_(self.key_slots[start:start + len(self.index)])
        self.seen = start + len(self.index)

    def begin(self, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        self.visible = self.key_slots <= self.index[:, None]          # [T, capacity]: bottom-right causal
        return self.cos, self.sin

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [B, H, T, D] (after RoPE), k/v [B, Hkv, T, D] (k before) -> [B, T, H, D]: the K/V
        stored, then attention over the whole buffer."""
        self.store(layer, q, k, v)
        return attend_masked(q, self.k[layer], self.v[layer], self.visible)

    def store(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """The pass's K/V at the slots `index`, as the cache's update() stores them."""
        self.k[layer].index_copy_(2, self.index, Rope.rotate(k, self.cos, self.sin))
        self.v[layer].index_copy_(2, self.index, v)
        if self.last_query is not None:     # the full cache keeps it for the retrieval rebuild
            self.last_query[layer] = q[:, :, -1]

    def end(self) -> None:
        """Nothing: the real cache counts the tokens (GraphedForward calls its end())."""


def warm_up(forward, device: torch.device) -> None:
    """Runs a pass twice on a side stream, as capture needs. Its inputs already hold the pass in
    flight, so the warm-up passes write the K/V that the replay writes again."""
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            forward()
    torch.cuda.current_stream(device).wait_stream(side)


class CapturedPass:
    """One (T, rows) pass of a model over StaticSlots: replayed from a CUDA graph, or run eagerly."""

    def __init__(self, model, static: StaticSlots, tokens: torch.Tensor, rows: int):
        self.model, self.static, self.rows = model, static, rows
        self.tokens = torch.empty_like(tokens)                        # [B, T]
        self.graph = None
        self.logits = None                                            # [B, rows, V] float32

    def forward(self) -> torch.Tensor:
        self.logits = self.model(self.tokens, self.static, last_only=self.rows)
        return self.logits

    def capture(self, pool) -> None:
        warm_up(self.forward, self.tokens.device)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self.forward()
        self.graph = graph

    def run(self) -> torch.Tensor:
        if self.graph is None:
            return self.forward()
        self.graph.replay()
        return self.logits

    @property
    def replays(self) -> bool:
        return self.graph is not None


class PiecewisePass:
    """One (T, rows) pass replayed in pieces (the module doc): piece i is layer i-1's attention
    output and MLP, then layer i's projections with its K/V stored at the slots (piece 0 embeds
    the tokens, piece L ends with the head), each replayed from its own graph or run eagerly; layer
    i's attention runs eagerly after piece i over the keys the pass sees (StaticSlots.seen)."""

    def __init__(self, model, static: StaticSlots, tokens: torch.Tensor, rows: int):
        self.model, self.static, self.rows = model, static, rows
        self.layers = model.model.layers
        self.tokens = torch.empty_like(tokens)                        # [B, T]
        B, T = tokens.shape
        self.attended = [torch.empty(B, T, model.cfg.num_heads, model.cfg.head_dim, dtype=model.dtype,
                                     device=tokens.device) for _ in self.layers]   # each [B, T, H, D]
        self.outputs: list = [None] * (len(self.layers) + 1)    # piece i's (x, q); the last's (logits,)
        self.graphs = None

    def piece(self, i: int) -> tuple:
        if i == 0:
            x = self.model.model.embed_tokens(self.tokens)            # [B, T, E]
        else:
            before = self.layers[i - 1]
            x = before.feed_forward(self.outputs[i - 1][0] + before.self_attn.output(self.attended[i - 1]))
        if i == len(self.layers):
            return (self.model.head(x, self.rows),)                   # [B, rows, V] float32
        layer = self.layers[i]
        q, k, v = layer.self_attn.queries(layer.input_layernorm(x), self.static.cos, self.static.sin)
        self.static.store(i, q, k, v)
        return x, q                                                   # [B, T, E], [B, H, T, D]

    def attention(self, i: int) -> None:
        """Layer i's attention over the seen keys, as the model's own pass runs it."""
        seen = self.static.seen
        k, v = self.static.k[i][:, :, :seen], self.static.v[i][:, :, :seen]   # [B, Hkv, S, D]
        self.attended[i].copy_(attend(self.outputs[i][1], k, v))

    def forward(self) -> torch.Tensor:
        for i in range(len(self.outputs)):
            self.outputs[i] = self.piece(i)
            if i < len(self.layers):
                self.attention(i)
        return self.outputs[-1][0]

    def capture(self, pool) -> None:
        """Each piece in its own graph: its inputs are the earlier pieces' outputs and `attended`,
        tensors at fixed addresses."""
        warm_up(self.forward, self.tokens.device)
        graphs = []
        for i in range(len(self.outputs)):
            graphs.append(torch.cuda.CUDAGraph())
            with torch.cuda.graph(graphs[-1], pool=pool):
                self.outputs[i] = self.piece(i)
        self.graphs = graphs

    def run(self) -> torch.Tensor:
        if self.graphs is None:
            return self.forward()
        for i, graph in enumerate(self.graphs):
            graph.replay()
            if i < len(self.layers):
                self.attention(i)
        return self.outputs[-1][0]

    @property
    def replays(self) -> bool:
        return self.graphs is not None


class GraphedForward:
    """A level's forward, model(tokens, cache, last_only) as Level.feed calls it, with the small
    passes over `cache` replayed from CUDA graphs (the module doc); every other pass is the model's."""

    def __init__(self, model, cache, capture: bool | None = None, whole_tokens: int = MAX_TOKENS):
        self.model, self.cache, self.whole_tokens = model, cache, whole_tokens
        self.capture = torch.cuda.is_available() and model.device.type == "cuda" if capture is None else capture
        self.pool = torch.cuda.graph_pool_handle() if self.capture else None
        self.passes: dict[tuple[int, int], CapturedPass] = {}
        self.asked: Counter = Counter()
        self.buffers = None      # the cache's K buffer the passes were made for
        self.failed = None       # why capture failed (then every pass runs eagerly)
        # a cache whose layers are not simply its buffers (the offloaded one: slots() is None) never replays
        self.has_slots = getattr(cache, "slots", lambda: None)() is not None

    def _key(self, tokens: torch.Tensor, cache, last_only) -> tuple[int, int] | None:
        """(T, rows) of a pass this forward replays once captured, or None for one that stays the model's."""
        T = tokens.shape[1]                                           # tokens [B, T]
        if (cache is not self.cache or not self.has_slots or self.failed or T > MAX_TOKENS
                or isinstance(last_only, torch.Tensor)):
            return None
        return T, (T if not last_only or int(last_only) >= T else int(last_only))

    def __call__(self, tokens: torch.Tensor, cache, last_only=False) -> torch.Tensor:
        key = self._key(tokens, cache, last_only)
        if key is None:
            return self.model(tokens, cache, last_only=last_only)
        self.asked[key] += 1
        if key not in self.passes and self.asked[key] < CAPTURE_AT:
            return self.model(tokens, cache, last_only=key[1])
        cos, sin = cache.begin(key[0])                                # evictions, capacity: the cache's own
        logits = self._static_pass(key, tokens, cos, sin, cache.slots())
        cache.end()
        return logits.clone()                                         # [B, rows, V]: the next replay overwrites it

    def prime(self, tokens: torch.Tensor, cache, last_only=False) -> None:
        """Runs this pass, each time rolled back, until it replays (a shape is captured on its
        CAPTURE_AT-th ask), so that the next one can be timed as the run will see it."""
        key, n = self._key(tokens, cache, last_only), cache.get_seq_length()
        while key is not None and key not in self.passes and not self.failed:
            self(tokens, cache, last_only)
            cache.crop(n)

    def _static_pass(self, key: tuple[int, int], tokens: torch.Tensor, cos, sin, slots) -> torch.Tensor:
        """The pass of shape `key` over the slots the cache just began: its inputs loaded, captured
        the first time (where capture is on), replayed after."""
        k, v, start, last_query = slots
        T, rows = key
        if k is not self.buffers:                                     # a cache that reallocated: start over
            self.passes, self.buffers = {}, k
        step = self.passes.get(key)
        fresh = step is None
        if fresh:
            kind = CapturedPass if T <= self.whole_tokens else PiecewisePass
            step = self.passes[key] = kind(self.model, StaticSlots(k, v, last_query, cos, sin), tokens, rows)
        step.tokens.copy_(tokens)
        step.static.load(cos, sin, start)
        if fresh and self.capture:
            try:
                step.capture(self.pool)
            except RuntimeError as e:   # an op the graph refuses: this level runs eagerly from now on
                self.failed = f"CUDA graph capture failed ({str(e).splitlines()[0][:160]}); passes run eagerly"
                print(f"[triforce] {self.failed}", file=sys.stderr)
                self.passes = {}
                return step.forward()
        return step.run()

    @property
    def captured(self) -> int:
        """How many pass shapes replay from graphs."""
        return sum(p.replays for p in self.passes.values())

    def __getattr__(self, name):   # device, dtype, cfg, counts_rows ...: the model's
        if name.startswith("__") or "model" not in self.__dict__:   # copy/pickle probes, a half-built object
            raise AttributeError(name)
        return getattr(self.model, name)
