"""Speculation as a stack of levels. Every mode is a stack, smallest proposer first:

    ar         [target+full]
    spec       [drafter+streaming, target+full]
    retrieval  [target+retrieval, target+full]
    streaming  [target+streaming, target+full]
    triforce   [drafter+streaming, target+retrieval, target+full]

draft(stack, seq, n) returns n tokens continuing `seq` distributed as the *top* level of the stack
would sample them, together with that level's distribution at each of them. One level alone
samples autoregressively; a taller stack lets the levels below propose and the top level verify
with the acceptance rule (accept.py), which emits tokens of exactly the top level's distribution.
Because each emitted token comes with the verifier's own distribution, the middle level's output
is a valid draft for the target: stacking the rule twice is TriForce, lossless at every level.
Under `--gamma auto` a round's draft may go on past γ while its proposer is sure of it (Extension):
when a draft stops depends only on the drafts, so that too is lossless.
"""
from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from dataclasses import asdict, dataclass

import torch

from triforce.runtime.accept import accept, accept_greedy
from triforce.runtime.cache import KVCache
from triforce.runtime.decode import pass_timed
from triforce.runtime.graphs import GraphedForward
from triforce.runtime.lookup import MAX_TOKENS, NGRAM, TARGET_MATCH, ContextLookup
from triforce.runtime.model import Transformer
from triforce.runtime.quant import weight_bytes
from triforce.runtime.sampling import SamplingParams, greedy_tokens, probs_from_logits, top_probability


@dataclass
class LevelStats:
    passes: int = 0          # forward passes of this level's model
    fed_tokens: int = 0      # tokens those passes processed
    seconds: float = 0.0     # wall time spent in this level's forward passes
    drafted: int = 0         # tokens proposed to this level (as verifier)
    accepted: int = 0        # of those, accepted
    rejections: int = 0      # rounds that ended at a rejected token (the others accepted all they were offered)
    copied: int = 0          # tokens proposed to this level by context lookup (lookup.py), not counted in drafted
    copied_accepted: int = 0 # of those, accepted
    copy_rejections: int = 0 # copy rounds that ended at a rejected copied token
    extended: int = 0        # of drafted, tokens proposed beyond the round's γ because the proposer was sure of them
    extended_accepted: int = 0   # of those, accepted (counted in accepted too)
    extended_rejections: int = 0 # rounds that ended at a rejected extension token (counted in rejections too)
    sure: int = 0            # drafted tokens tested (accepted, or the rejected one) whose proposer was sure of them
    sure_accepted: int = 0   # of those, accepted (Extension's rounds only: the confidences are read there)
    rebuilds: int = 0        # retrieval cache rebuilds (middle level only)
    moved_bytes: int = 0     # bytes copied between the host tier and the device during its passes


class PassTimes:
    """(T, wall seconds) of a level's last WINDOW passes: what `--gamma auto` rescales its start-up
    probe with (gamma.corrected)."""
    WINDOW = 32

    def __init__(self):
        self.recent: deque = deque(maxlen=self.WINDOW)

    def add(self, T: int, seconds: float) -> None:
        self.recent.append((T, seconds))


class Seq:
    """A token sequence, read-only: the first n tokens of the committed list (SpecDecoder.seq), then a
    few more (a round's drafts). `seq + tokens` shares the list, so the sequences a round builds cost
    their drafts, not the prompt: at 32K each list copy took ~0.1 ms with its ints cold in the cache,
    a round made about ten, and views made greedy requests 1.8% faster (docs/BENCHMARKS.md, round 50).
    `base` must only grow (SpecDecoder.seq does), so a view of its first n tokens never changes. Slices
    are lists."""
    __slots__ = ("base", "n", "tail")

    def __init__(self, base: list[int], n: int | None = None, tail: tuple[int, ...] = ()):
        self.base, self.n, self.tail = base, len(base) if n is None else n, tail

    def __len__(self) -> int:
        return self.n + len(self.tail)

    def __add__(self, more) -> "Seq":
        return Seq(self.base, self.n, self.tail + tuple(more))

    def __iter__(self):
        return itertools.chain(itertools.islice(self.base, self.n), self.tail)

    def __eq__(self, other) -> bool:
        if not isinstance(other, (Seq, list, tuple)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return list(self)[i]
            head = self.base[start:min(stop, self.n)] if start < self.n else []
            return head + list(self.tail[max(start - self.n, 0):max(stop - self.n, 0)])
        j = i + len(self) if i < 0 else i
        if not 0 <= j < len(self):
            raise IndexError(f"token {i} of a sequence of {len(self)}")
        return self.base[j] if j < self.n else self.tail[j - self.n]


class Level:
    """One model reading one cache. Asked for the distributions at the last k positions of a
    sequence, it rolls its cache back to the longest prefix it shares with that sequence and
    feeds only what is missing, in passes of at most `max_pass` tokens."""

    def __init__(self, name: str, model: Transformer, cache: KVCache, params: SamplingParams, max_pass: int,
                 role: str = "target"):
        self.name, self.model, self.cache, self.params, self.max_pass = name, model, cache, params, max_pass
        self.forward = model         # model(tokens, cache, last_only): the model's, or runtime/graphs.py's replays
        self.role = role             # whose weights it runs: target | drafter (runtime/modes.py LevelSpec.model)
        self.cached: list[int] | Seq = []  # the tokens whose K/V the cache holds (logically)
        self.safe = 0                # cached[:safe] is a prefix of the committed sequence
        self.stats = LevelStats()
        self.times = PassTimes()     # recent passes' seconds by T (the --gamma auto tuner reads them)
        self.traffic = None          # offload.tier.Traffic when the level's passes move data between tiers
        self.counts_rows = getattr(model, "counts_rows", False)  # last_only=n gives n rows (Transformer)
        self.weights = getattr(model, "weights", "same")   # same | int8 | int4 (+vocabN): runtime/quant.py
        self.weight_bytes = weight_bytes(model)             # bytes of weights one pass reads
        self.last = None             # (logits [k, V], probs [k, V] or None at T = 0) of the last round (confidences)

    def feed(self, seq: "list[int] | Seq", keep_last: int = 0) -> torch.Tensor | None:
        """Makes the cache hold seq; returns the logits of its last `keep_last` positions [k, V]."""
        keep = min(self._shared_prefix(seq), len(seq) - keep_last)
        if keep < len(self.cached):
            self.cache.crop(keep)
        todo, logits = seq[keep:], None
        spent, moved = 0.0, self.traffic.total if self.traffic else 0
        for i in range(0, len(todo), self.max_pass):
            part = torch.tensor([todo[i:i + self.max_pass]], device=self.model.device)  # [1, T]
            final = i + self.max_pass >= len(todo)
            rows = keep_last if final and keep_last else 1   # logits rows anyone reads (1: a cheap row)
            if rows > 1 and not self.counts_rows:            # a model that only knows last_only True/False
                rows = False
            out, seconds = pass_timed(self.forward, part, self.cache, last_only=rows)   # [1, R, V]
            self.times.add(part.shape[1], seconds)
            spent += seconds
            if final and keep_last:
                logits = out[0, -keep_last:]
            self.stats.passes += 1
        self.stats.fed_tokens += len(todo)
        self.stats.seconds += spent
        self.stats.moved_bytes += self.traffic.total - moved if self.traffic else 0
        self.cached = seq if isinstance(seq, Seq) else list(seq)   # a Seq never changes: kept, not copied
        return logits

    def reset_stats(self) -> None:
        """Zeroes the figures (after the prefill: stats are the decode's), the cache's own included."""
        self.stats = LevelStats()
        self.times = PassTimes()
        if hasattr(self.cache, "forced_evictions"):   # a StreamingLLM cache: the prefill's passes overflow
            self.cache.forced_evictions = 0          # its scratch by design (they are committed right after)

    def probs(self, seq: "list[int] | Seq", k: int) -> torch.Tensor:
        """Distributions of the next token after each of the last k positions of seq: [k, V]."""
        logits = self.feed(seq, keep_last=k)
        probs = probs_from_logits(logits, self.params)
        self.last = (logits, probs)
        return probs

    def greedy_tokens(self, seq: "list[int] | Seq", k: int) -> list[int]:
        """probs() at temperature 0, as the tokens its one-hot rows are at: [k] token ids."""
        logits = self.feed(seq, keep_last=k)
        self.last = (logits, None)
        return greedy_tokens(logits)

    def confidences(self, n: int) -> list[float]:
        """How sure this level was of the first n tokens its last round emitted (top_probabilities
        of their rows). Extension (below) reads them."""
        logits, probs = self.last
        return top_probabilities(logits[:n], None if probs is None else probs[:n], self.params.greedy).tolist()

    def commit(self, committed: list[int]) -> None:
        """Records how much of the cache the committed sequence confirms (keeps lookups short and
        lets an evicting cache evict among those tokens only)."""
        self.safe = self._shared_prefix(committed)
        self.cache.commit(self.safe)

    def _shared_prefix(self, seq: "list[int] | Seq") -> int:
        return shared_prefix(self.cached, seq, self.safe)


def top_probabilities(logits: torch.Tensor, probs: torch.Tensor, greedy: bool) -> torch.Tensor:
    """How sure a level is of the token it draws at each row: the largest probability of the
    distribution it draws from (greedy: of the softmax of the logits at temperature 1, as a
    one-hot row says nothing; a greedy level keeps no probs). logits, probs [n, V] -> [n]."""
    if not greedy:
        return probs.amax(-1)
    return top_probability(logits)


def shared_prefix(a, b, start: int = 0) -> int:
    """How many first tokens the sequences a and b share, given that their first `start` agree."""
    n = min(len(a), len(b))
    i = min(start, n)
    if isinstance(a, Seq) and isinstance(b, Seq) and a.base is b.base:
        i = max(i, min(a.n, b.n))   # both are prefixes of one committed list that far
    while i < n and a[i] == b[i]:
        i += 1
    return i


def verify_round(stack: list[Level], gammas: list[int], seq: "list[int] | Seq", k: int,
                 generator: torch.Generator, lookup: ContextLookup | None = None,
                 room: int = 0, extend: "Extension | None" = None) -> tuple[list[int], torch.Tensor | None]:
    """One round of stack[-1]: the levels below propose k tokens, stack[-1] verifies them; or,
    where `lookup` finds seq's end earlier in seq, the tokens that followed there (at most `room`,
    q one-hot: lookup.py). `extend`: the proposals may go on past k while the level below is sure
    of them (Extension). Returns the emitted tokens (accepted + recovered/bonus, 1..k+1 of them,
    k as proposed) and stack[-1]'s distributions at each [n, V] (None at T = 0: a greedy round reads
    each row's argmax alone, accept.accept_greedy)."""
    top = stack[-1]
    copied = lookup.copy(seq, room, TARGET_MATCH if top.name == "target" else NGRAM) \
        if lookup is not None and len(stack) > 1 else []
    base = k
    if copied:
        drafted, k = copied, len(copied)
    else:
        drafted, q = draft(stack[:-1], gammas, seq, k, generator, lookup, extend) if k else ([], None)
        k = len(drafted)                                                    # k, or more where extended
    if top.params.greedy:   # every distribution one-hot: the rule reads each row's argmax alone
        num, nxt = accept_greedy(drafted, top.greedy_tokens(seq + drafted, k + 1))
        p = None
    else:
        p = top.probs(seq + drafted, k + 1)                                 # [k+1, V]
        if copied:   # q one-hot at each copied token
            q = torch.zeros_like(p[:k]).scatter_(1, torch.tensor(copied, device=p.device)[:, None], 1.0)
        if k:
            num, nxt = accept(torch.tensor([drafted], device=p.device), q[None], p[None], generator)
        else:  # nothing drafted: plain sampling from the top level
            num, nxt = accept(torch.zeros(1, 0, dtype=torch.long, device=p.device), p[None, :0], p[None], generator)
        num, nxt = int(num[0]), int(nxt[0])  # host sync: the sequence is bookkept on the host
    if copied:
        top.stats.copied += k
        top.stats.copied_accepted += num
        top.stats.copy_rejections += num < k
    else:
        top.stats.drafted += k
        top.stats.accepted += num
        top.stats.rejections += num < k
        if k > base:   # extension tokens: the tuner prices them apart (GammaTuner.alphas)
            top.stats.extended += k - base
            top.stats.extended_accepted += max(0, num - base)
            top.stats.extended_rejections += base <= num < k
        if extend is not None and extend.seen:   # per tested token: was its proposer sure of it?
            tested = extend.sure(min(num + 1, k))
            top.stats.sure += sum(tested)
            top.stats.sure_accepted += sum(tested[:num])
    return drafted[:num] + [nxt], None if p is None else p[:num + 1]


def draft(stack: list[Level], gammas: list[int], seq: "list[int] | Seq", n: int,
          generator: torch.Generator, lookup: ContextLookup | None = None,
          extend: "Extension | None" = None) -> tuple[list[int], torch.Tensor | None]:
    """n tokens after seq, sampled as stack[-1] would, with stack[-1]'s distributions [n, V] (None at T = 0);
    more (up to extend.cap) while extend says stack[-1] is sure enough of the last one.
    gammas[i] is how many tokens stack[i] proposes per round to stack[i + 1]."""
    tokens, rows = [], []
    while len(tokens) < n or (extend is not None and extend.more(n, len(tokens))):
        room = (n if len(tokens) < n else extend.cap) - len(tokens) - 1
        k = 0 if len(stack) == 1 else min(gammas[len(stack) - 2], room)
        new, p = verify_round(stack, gammas, seq + tokens, k, generator, lookup, room)
        tokens += new
        rows.append(p)
        if extend is not None:
            extend.seen += stack[-1].confidences(len(new))
    return tokens, None if rows[0] is None else torch.cat(rows)   # greedy: no distributions (verify_round)


@dataclass
class Extension:
    """One round's drafts to the top level going on past its γ while the proposer is sure: after
    the γ tokens, one more round of the levels below whenever the last token drafted was drawn
    from a distribution whose top probability is at least `confidence` (Level.confidences) and
    `pays` (GammaTuner.extension_pays: its expected tokens are worth its cost, given which tokens so
    far the proposer was sure of, as this bar classes them) says so, up to `cap` tokens. Lossless:
    when to stop depends only on what the proposers drew and their own distributions, never on the
    verifier's, so the acceptance rule keeps the output exact. A draft the proposer is sure of is
    nearly always accepted (teacher-forced on the essays at 7K and 32K: greedy, a middle-level top
    probability of 0.8 or more agreed every time, below 0.5 0.7-0.8; at T = 0.6, 0.99 or more
    passed 0.97-1.0; gamma.sure_bar, docs/BENCHMARKS.md, round 45), so a fixed γ stops
    short of long sure runs."""
    confidence: float
    cap: int
    pays: object = None          # pays(sure, base, drafted) -> bool, sure[i]: token i reached the bar; None: always
    seen: list = dataclasses.field(default_factory=list)   # the proposer's confidence in each token drafted so far

    def sure(self, n: int) -> list[bool]:
        """Whether the proposer was sure of each of the first n tokens drafted (this bar)."""
        return [c >= self.confidence for c in self.seen[:n]]

    def more(self, base: int, drafted: int) -> bool:
        if drafted >= self.cap or drafted < base or not self.seen or self.seen[-1] < self.confidence:
            return False
        return self.pays is None or self.pays(self.sure(drafted), base, drafted)


@dataclass
class SpecDecoder:
    """The generate loop's Decoder for any stack: one step is one round of the top level."""
    stack: list[Level]
    gammas: list[int]                   # gammas[i]: tokens stack[i] proposes per round
    seq: list[int]                      # committed tokens, prompt included
    generator: torch.Generator
    on_round: object = None             # called after each step (e.g. the retrieval rebuild policy)
    lookup: ContextLookup | None = None # context lookup's index of seq (lookup.py); None: off
    copy_cap: int = MAX_TOKENS          # tokens the top level takes from one copy at most (--gamma auto sets it)
    extend: Extension | None = None     # drafts past gammas[-1] while sure (--gamma auto sets it)

    def step(self, budget: int) -> list[int]:
        k = 0 if len(self.stack) == 1 else min(self.gammas[-1], budget - 1)
        if self.lookup is not None:
            self.lookup.extend(self.seq)
        # this round's extension, if any (never past the tokens left: the caches are sized for them)
        extend = dataclasses.replace(self.extend, cap=min(self.extend.cap, budget - 1), seen=[]) \
            if self.extend is not None and k else None
        new, _ = verify_round(self.stack, self.gammas, Seq(self.seq), k, self.generator, self.lookup,
                              min(budget - 1, self.copy_cap), extend)
        self.seq += new   # in place: the Seqs of earlier rounds view its first tokens, which never change
        committed = Seq(self.seq)
        for level in self.stack:
            level.commit(committed)
        if self.on_round:
            self.on_round(self)
        return new

    @property
    def stats(self) -> dict:
        """Per-level figures so far (built when read: the loop reads them once, at the end)."""
        return level_stats(self.stack)


def level_stats(stack: list[Level]) -> dict:
    """Per-level figures for --json and stderr: acceptance, passes, time, the weights a pass reads
    (kind and bytes: what a quantized lower level buys); for a StreamingLLM level also
    forced_evictions (passes whose speculative tokens overflowed the scratch region: still
    lossless, but its proposals lost context, so non-zero means raise the scratch); on CUDA, for a
    lower level, cuda_graphs (how many pass shapes it replayed from graphs: runtime/graphs.py)."""
    out = {}
    for level in stack:
        s = asdict(level.stats)
        s["seconds"] = round(s["seconds"], 4)
        s["weights"] = getattr(level, "weights", "same")
        s["weight_bytes"] = getattr(level, "weight_bytes", 0)
        dtype = getattr(getattr(level, "model", None), "dtype", None)   # a lower level may compute in its own
        if isinstance(dtype, torch.dtype):
            s["dtype"] = str(dtype).removeprefix("torch.")
        if hasattr(level.cache, "budget"):          # a retrieval cache: its budget (set, or budget_for's)
            s["budget"] = level.cache.budget
        if level.stats.drafted:
            s["acceptance"] = round(level.stats.accepted / level.stats.drafted, 4)
        if isinstance(getattr(level, "forward", None), GraphedForward):
            s["cuda_graphs"] = level.forward.captured   # pass shapes replayed from CUDA graphs
        evictions = getattr(getattr(level, "cache", None), "forced_evictions", None)
        if evictions is not None:   # a StreamingLLM level
            s["forced_evictions"] = evictions
        out[level.name] = s
    return {"levels": out}
