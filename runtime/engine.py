"""An Engine holds what outlives one request (models, tokenizer, device) and runs requests:
prompt -> token ids -> checks -> caches -> prefill -> decode -> result. The CLI, batch jobs and
the Ray actors all call Engine.generate.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from triforce.runtime.cache_full import FullCache
from triforce.runtime.config import ModelConfig, RunConfig, with_rope_scaling
from triforce.runtime.decode import decode, timed
from triforce.runtime.drafter import default_drafter_dir
from triforce.runtime.errors import UserError
from triforce.runtime.gamma import GammaTuner, auto_caps, chain, load_costs, save_costs
from triforce.runtime.graphs import level_forward
from triforce.runtime.model import Transformer, fuse_projections, load_model
from triforce.runtime.ops import pack_linears
from triforce.runtime.modes import LevelSpec, make_cache, mode_levels
from triforce.runtime.placement import Placement
from triforce.runtime.probes import resolve_device
from triforce.runtime.lookup import ContextLookup
from triforce.runtime.speculate import Level, SpecDecoder, level_stats, shared_prefix


def resolve_model_dir(model: str | None) -> Path:
    if model is None:
        from triforce.runtime.assets import default_model_dir
        return default_model_dir()
    return Path(model).expanduser().resolve()


# tokenizer_config.json classes that are tokenizer.json as it stands: the class AutoTokenizer
# would build anyway, loaded without its config lookups (2 s of a `triforce generate` start-up)
PLAIN_FAST_TOKENIZERS = ("TokenizersBackend", "PreTrainedTokenizerFast")


def load_tokenizer(model_dir: Path):
    try:
        if plain_fast_tokenizer(model_dir):
            from transformers import PreTrainedTokenizerFast
            return PreTrainedTokenizerFast.from_pretrained(str(model_dir))
        from transformers import AutoTokenizer
        return AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load a tokenizer from {str(model_dir)!r} ({str(e).splitlines()[0]}); "
                        "the checkpoint directory needs tokenizer.json or tokenizer.model") from None


def plain_fast_tokenizer(model_dir: Path) -> bool:
    """Whether the checkpoint's tokenizer is its tokenizer.json with no class of its own."""
    try:
        config = json.loads((model_dir / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return (model_dir / "tokenizer.json").is_file() and config.get("tokenizer_class") in PLAIN_FAST_TOKENIZERS


def encode(tokenizer, model_dir: Path, text: str, chat: bool = False) -> list[int]:
    """The prompt's token ids (wrapped in the tokenizer's chat template when `chat`)."""
    if not text or not text.strip():
        raise UserError("the prompt is empty; pass --prompt TEXT or --prompt-file PATH with some text")
    if chat:
        if not getattr(tokenizer, "chat_template", None):
            raise UserError(f"the tokenizer of {str(model_dir)!r} has no chat template; drop --chat")
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return tokenizer.encode(text)


@dataclass
class SavedPrefill:
    """The target's prefill of `tokens` kept for later requests (Engine keep_prefill), made in
    passes of `chunk` tokens. resident: `cache` is a request's own full cache, lent to the next
    request that has room; it may hold positions past the prompt and another last query until
    Engine._settled_prefill puts it back (crop, and last_query, each layer's query at the prompt's
    last token, which the retrieval cache scores with). Else a copy in host memory of exactly the
    prompt (offloaded or sharded targets, a prompt cache file)."""
    tokens: tuple
    chunk: int
    cache: FullCache
    last_query: torch.Tensor   # [L, 1, H, D]
    resident: bool = False


@dataclass
class Result:
    model_path: str
    mode: str
    prompt_tokens: int
    token_ids: list[int]
    text: str
    stopped_by: str
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return dict(model_path=self.model_path, mode=self.mode, prompt_tokens=self.prompt_tokens,
                    token_ids=self.token_ids, text=self.text, stopped_by=self.stopped_by, stats=self.stats)


class Checkpoint:
    """What every engine serves before any model runs: the checkpoint's directory, its config (with
    run's RoPE scaling) and tokenizer, prompt encoding and length checks. Engine adds the target,
    its caches and the decode loop (and the Ray coordinator's RayEngine is an Engine on shards);
    the Ray driver's RayClient is only this, and forwards requests to the coordinator."""

    def open_checkpoint(self, run: RunConfig, keep_prefill: bool = False) -> None:
        """Reads the checkpoint's directory, config and tokenizer (before any target is placed)."""
        self.keep_prefill, self._prefill_memo = keep_prefill, None
        self.prefill_saved_anew = False   # whether the last prefill replaced the saved copy (keep_prefill)
        self.model_dir = resolve_model_dir(run.model)
        self.cfg: ModelConfig = with_rope_scaling(ModelConfig.from_dir(self.model_dir), run.rope_scaling)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.dtype = run.dtype

    def encode(self, text: str, chat: bool = False) -> list[int]:
        return encode(self.tokenizer, self.model_dir, text, chat)

    def check_length(self, prompt_tokens: int, max_new_tokens: int) -> None:
        limit = self.cfg.max_context
        if prompt_tokens + max_new_tokens > limit:
            raise UserError(
                f"prompt of {prompt_tokens} tokens + max_new_tokens {max_new_tokens} exceeds the model's "
                f"{limit} positions; shorten the prompt, lower --max-new-tokens, or extend the context with "
                f"RoPE scaling, e.g. --rope-scaling yarn:{-(-(prompt_tokens + max_new_tokens) // limit) * 2} "
                "(quality degrades beyond the trained length)")
        window = self.cfg.sliding_window
        if window and prompt_tokens + max_new_tokens > window:
            raise UserError(f"context of {prompt_tokens + max_new_tokens} tokens exceeds the checkpoint's "
                            f"sliding window {window}, which this runtime does not implement; shorten the prompt")


class Engine(Checkpoint):
    """keep_prefill: remember the target's prefilled KV so that runs with the same prompt (the
    modes and temperatures of a benchmark) copy it instead of recomputing it. context: prompt +
    new tokens the placement is planned for under `offload: auto` (None: the model's max_context,
    the most check_length lets any request use)."""

    stored_costs = True   # --gamma auto's pass costs also kept on disk for later processes (gamma.save_costs)

    def __init__(self, run: RunConfig, keep_prefill: bool = False, context: int | None = None):
        self.open_checkpoint(run, keep_prefill)
        self.pass_costs: dict[tuple, list] = {}   # --gamma auto: pass_cost_key -> the last such request's costs
        self.device = resolve_device(run.device)
        from triforce.offload.plan import placement_for_run
        self.placement = placement_for_run(self.cfg, run, self.device, context or self.cfg.max_context)
        if self.placement.weights_streamed:
            self.model = fuse_projections(load_model(self.model_dir, run.dtype, "cpu", self.cfg))  # need not fit the device
            from triforce.offload.weights import offload_weights
            offload_weights(self.model, *self.tiers(), self.device)
        else:
            self.model = pack_linears(fuse_projections(load_model(self.model_dir, run.dtype, self.device, self.cfg)))
        self.drafter = self.load_drafter(run) if run.mode in DRAFTER_MODES else None

    tier = copier = None  # offload.tier.HostTier and Copier, created by tiers() when offloading

    def tiers(self):
        """The host tier and the copier, created on first use (only offloading needs them)."""
        if self.tier is None:
            from triforce.offload.tier import Copier, HostTier
            self.tier, self.copier = HostTier(self.device), Copier(self.device)
        return self.tier, self.copier

    def full_cache(self, rope, capacity: int, on_chip: int) -> FullCache:
        """The target's full cache: resident, or with layers beyond `on_chip` in the host tier. With
        keep_prefill, a resident cache is the saved prefill's own where it has room (nothing
        allocated: the prefill then finds its prompt in place, or overwrites what it does not share)."""
        if on_chip >= self.cfg.num_layers:
            saved = self._prefill_memo
            if self.keep_prefill and saved is not None and saved.resident and saved.cache.capacity >= capacity:
                saved.cache.rope = rope
                return saved.cache
            return FullCache(self.cfg, rope, 1, capacity, self.device, self.model.dtype)
        from triforce.offload.kv import OffloadedFullCache
        tier, copier = self.tiers()
        # arenas per request (closed when it ends), named uniquely: batched sequences run at once
        return OffloadedFullCache(self.cfg, rope, 1, capacity, self.device, self.model.dtype,
                                  on_chip, tier, copier, name=f"kv-{next(_ARENA_IDS)}")

    def load_drafter(self, run: RunConfig) -> Transformer:
        if run.draft_model is None and run.model is not None:
            raise UserError(f"mode {run.mode!r} needs a drafter for {str(self.model_dir)!r}: pass --draft-model DIR "
                            "(a small checkpoint with the same tokenizer; `triforce distill` makes one)")
        if run.draft_model is None:
            draft_dir = default_drafter_dir()
        else:
            draft_dir = Path(run.draft_model).expanduser().resolve()
        draft_cfg = ModelConfig.from_dir(draft_dir)
        check_same_tokenizer(self.model_dir, self.tokenizer, draft_dir, draft_cfg, self.cfg)
        if draft_cfg.max_context < run.draft_sinks + run.draft_window:
            raise UserError(f"drafter {str(draft_dir)!r} has {draft_cfg.max_context} positions, fewer than its "
                            f"cache (draft_sinks {run.draft_sinks} + draft_window {run.draft_window}); shrink the window")
        self.draft_dir = draft_dir
        return pack_linears(fuse_projections(load_model(draft_dir, run.dtype, self.device, draft_cfg)))

    def lower_levels(self, run: RunConfig) -> RunConfig:
        """run with its auto lower-level settings made concrete here (RunConfig.lower_levels): by
        this engine's device, dtype and weight placement (streamed weights get no quantized copy),
        and whether the drafter loaded so far recorded its corpus's token counts (only the
        drafter's own level reads draft_vocab, and only after the drafter is loaded)."""
        from triforce.runtime.quant import native_kernels_run
        from triforce.runtime.vocab import COUNTS_FILE
        draft_dir = getattr(self, "draft_dir", None)
        quantized = run.backend == "local" and not self.placement.weights_streamed and native_kernels_run(self.model)
        return run.lower_levels(quantized=quantized,
                                counted=draft_dir is not None and (Path(draft_dir) / COUNTS_FILE).is_file())

    def level_model(self, run: RunConfig, role: str) -> Transformer:
        """The model a lower level runs on: the target for role "middle", the drafter for "drafter",
        each as a quantized and/or vocabulary-pruned copy when run says so (built once per setting
        and kept; auto settings are made concrete here alone, by lower_levels, as every path to a
        lower level comes through). The full target never goes through here: it always runs on its
        own weights."""
        from triforce.runtime.quant import lower_level_copy
        run = self.lower_levels(run)
        if role == "middle":
            source, weights, vocab = self.model, run.middle_weights, 0
        else:
            source, weights, vocab = self.drafter, run.draft_weights, run.draft_vocab
        built = self.__dict__.setdefault("_level_models", {})   # (RayEngine has its own __init__)
        dtype = self.lower_level_dtype(run, source, weights)
        key = (role, weights, vocab, dtype)
        if key not in built:
            kept = None
            if vocab:
                from triforce.runtime.vocab import drafter_token_counts, kept_token_ids
                counts = drafter_token_counts(getattr(self, "draft_dir", None), self.tokenizer, self.cfg.vocab_size)
                always = list(self.tokenizer.all_special_ids) + list(self.cfg.eos_token_ids)
                kept = kept_token_ids(counts, vocab, always)
            built[key] = lower_level_copy(source, weights, kept, dtype=dtype)
        return built[key]

    def lower_level_dtype(self, run: RunConfig, source: Transformer, weights: str) -> torch.dtype | None:
        """bf16 for a quantized lower level of an fp32 model on a CPU whose native bf16 kernels run
        (the local backend): a proposer's dtype never reaches the output (the target decides every
        token), and in bf16 its pass reads half the KV bytes on the faster bf16 kernels (the
        middle level at 7K: 7.2 against 13.7 ms a pass in fp32, round 20, before fp32 passes
        had their one-call plan). None: the source's own dtype."""
        from triforce.runtime.model import plan_kernels
        if weights == "same" or source.dtype != torch.float32 or source.device.type != "cpu" or run.backend != "local":
            return None
        kernels = plan_kernels()
        return torch.bfloat16 if kernels is not None and kernels[0].has_avx512_bf16() else None   # (not on AVX2 builds)

    def build_stack(self, run: RunConfig, capacity: int) -> tuple[list[Level], list[int]]:
        """The levels of run.mode (runtime/modes.py), smallest proposer first, and the gammas between them."""
        specs, gammas = mode_levels(run, capacity)
        ropes = {}  # one RoPE table per (model, positions): the full and retrieval caches share one

        def level(spec: LevelSpec) -> Level:
            # the full target runs on its own weights; the middle level and the drafter may run on
            # quantized / vocabulary-pruned copies (level_model)
            role = "middle" if spec.cache.kind == "retrieval" else spec.model
            model = self.model if spec.cache.kind == "full" or spec.name == "streaming" else self.level_model(run, role)
            key = (spec.model, spec.cache.positions, model.dtype)    # a lower level may compute in another dtype
            if key not in ropes:
                ropes[key] = model.rope(spec.cache.positions)
            rope = ropes[key]
            on_chip = self.placement.for_request(run.on_chip_layers).on_chip_layers
            cache = self.full_cache(rope, capacity, on_chip) if spec.cache.kind == "full" else \
                make_cache(spec.cache, model.cfg, rope, self.device, model.dtype)
            built = Level(spec.name, model, cache, run.sampling, spec.max_pass, role=spec.model)
            # on a GPU passes of up to 16 tokens are bound by launches: they replay from CUDA graphs,
            # those of more than one token on the target's weights in pieces around attention (runtime/graphs.py)
            built.forward = level_forward(model, cache, run.cuda_graphs, spec.model)
            return built

        return [level(spec) for spec in specs], gammas

    def prefill(self, stack: list[Level], prompt: list[int], on_prefill: Callable[[int], None] | None) -> int:
        """Fills every level with the prompt but its last token (each decode step starts by feeding
        the newest committed token). A level on the target's weights fills its cache from the
        target's full cache (cache.fill_from: each policy knows how); any other level runs passes
        of its max_pass tokens; the target too, but with keep_prefill it first takes what an
        earlier request's saved prefill holds of this prompt (_saved_prefill): in place where the
        target's cache is the saved one (full_cache), else copied. Returns how many positions
        were taken so."""
        context, target = prompt[:-1], stack[-1]
        lent = self._prefill_memo is not None and self._prefill_memo.cache is target.cache   # (full_cache)
        saved, reused = self._saved_prefill(context, target.max_pass)
        if lent:   # the saved prefill is this cache: what this prompt shares with it stays, the rest goes
            if reused < len(context):
                self.forget_prefill()   # this prompt's own passes overwrite it from `reused` on
            target.cache.crop(reused)
        for level in reversed(stack):  # the target first: the levels below fill from its cache
            source = saved if level is target else target.cache if level.role == "target" else None
            filled = reused if level is target else len(context) if source is not None else 0
            if filled:
                if not (level is target and lent):
                    level.cache.fill_from(source, filled)
                level.cached = list(context[:filled])
                level.commit(level.cached)
            if filled < len(context):
                self._prefill_passes(level, context, on_prefill if level is target else None, filled)
        for level in stack:
            level.reset_stats()
        self.prefill_saved_anew = self.keep_prefill and reused < len(context)
        if self.keep_prefill and type(target.cache) is FullCache:
            # the target's own cache is the saved copy: a later request with room takes it in place
            self._prefill_memo = SavedPrefill(tuple(context), target.max_pass, target.cache,
                                              target.cache.last_query.clone(), resident=True)
        elif self.prefill_saved_anew:
            self.forget_prefill()   # the earlier copy goes before this one is made
            # in host memory: the target's own KV had to leave the device (offloaded layers), or lives on shards
            kept = FullCache(self.cfg, target.cache.rope, 1, len(context), torch.device("cpu"), self.model.dtype)
            kept.fill_from(target.cache, len(context))
            self._prefill_memo = SavedPrefill(tuple(context), target.max_pass, kept, kept.last_query.clone())
        return reused

    def export_prefill(self) -> tuple | None:
        """The saved prefill as data: (tokens, pass size, k, v [L, 1, Hkv, n, D], last_query [L, 1, H, D]),
        or None (runtime/prompt_cache.py keeps it in a file)."""
        saved = self._settled_prefill()
        if saved is None:
            return None
        n = len(saved.tokens)
        return list(saved.tokens), saved.chunk, saved.cache.k[:, :, :, :n], saved.cache.v[:, :, :, :n], saved.last_query

    def import_prefill(self, tokens: list[int], chunk: int, k: torch.Tensor, v: torch.Tensor,
                       last_query: torch.Tensor) -> None:
        """Makes export_prefill's data (from another process) the saved prefill, in host memory."""
        cache = FullCache(self.cfg, None, 1, len(tokens), torch.device("cpu"), self.model.dtype)
        if k.shape != cache.k.shape or v.shape != cache.v.shape or last_query.shape != cache.last_query.shape:
            raise UserError(f"a saved prefill of K/V {tuple(k.shape)} does not fit this model's {tuple(cache.k.shape)}")
        cache.k.copy_(k), cache.v.copy_(v), cache.last_query.copy_(last_query)
        cache.length = len(tokens)
        self._prefill_memo = SavedPrefill(tuple(tokens), chunk, cache, cache.last_query.clone())

    def forget_prefill(self) -> None:
        """Drops the saved prefill (keep_prefill): the next request prefills from scratch."""
        self._prefill_memo = None

    def _settled_prefill(self) -> "SavedPrefill | None":
        """The saved prefill with its cache back at its prompt: a request that ran on it in place
        wrote positions past the prompt and each layer's last query (the retrieval cache scores
        with the prefill's). None if nothing is saved."""
        saved = self._prefill_memo
        if saved is not None and saved.resident:
            if saved.cache.length < len(saved.tokens):   # cropped below its prompt by a caller: not whole
                self.forget_prefill()
                return None
            saved.cache.crop(len(saved.tokens))
            saved.cache.last_query.copy_(saved.last_query)
        return saved

    def _saved_prefill(self, context: list[int], chunk: int) -> tuple[FullCache | None, int]:
        """The target's prefill saved by an earlier request (keep_prefill), and how many of this
        context's first positions to take from it: all of them for the same context; else the
        positions the two contexts share, in whole prefill passes of `chunk` tokens and short of
        this context's end. A prefill runs its passes at multiples of `chunk` from position 0, so up
        to that point both requests ran the same tokens in the same passes: the copy is bit for bit
        what this request's own passes would write, and its passes from there on (the last of them
        leaving each layer's last query for the retrieval cache) are the ones a full prefill runs.
        A batch of questions over one document prefills the document once."""
        # an engine without keep_prefill (a batch's sequences: copies of one that has it) only reads it
        saved = self._settled_prefill() if self.keep_prefill else self._prefill_memo
        if saved is None or saved.chunk != chunk or saved.cache.length < len(saved.tokens):
            return None, 0
        if saved.tokens == tuple(context):
            return saved.cache, len(context)
        reused = min(shared_prefix(saved.tokens, context), len(context) - 1) // chunk * chunk
        return (saved.cache, reused) if reused > 0 else (None, 0)

    @staticmethod
    def _prefill_passes(level: Level, context: list[int], on_prefill: Callable[[int], None] | None,
                        begin: int = 0) -> None:
        """Feeds the context in passes of max_pass tokens. A StreamingLLM cache (the drafter's)
        keeps only its sinks and its `window` most recent tokens, so only those are fed, each at
        the slot it would hold (the tokens between are skipped): at 32K the drafter's prefill
        reads 256 tokens, not 32K. The recent tokens then attend to fewer earlier ones than a pass
        over every token gives them; that changes the drafter's proposals only, never the output.
        begin: the positions the cache already holds (a multiple of max_pass, or 0)."""
        cache = level.cache
        if hasattr(cache, "skip"):
            sinks = min(cache.sinks, len(context))
            recent = max(sinks, len(context) - cache.window)   # the first recent token kept
            if recent > sinks:
                level.feed(context[:sinks])
                cache.skip(recent - sinks)
                level.cached = list(context[:recent])          # seen: the skipped ones evicted
                level.commit(level.cached)
                begin = recent
        for end in range(begin + level.max_pass, len(context) + level.max_pass, level.max_pass):
            level.feed(context[:end])
            level.commit(context[:end])
            if on_prefill:
                on_prefill(min(end, len(context)))

    def decoder(self, stack: list[Level], gammas: list[int], seq: list[int], generator: torch.Generator,
                on_round) -> SpecDecoder:
        """The request's Decoder (the Ray backend's adds restarts of failed shards)."""
        return SpecDecoder(stack, gammas, seq, generator, on_round=on_round)

    def generate(self, prompt_ids: list[int], run: RunConfig,
                 on_tokens: Callable[[list[int]], None] | None = None,
                 on_prefill: Callable[[int], None] | None = None) -> Result:
        self.check_length(len(prompt_ids), run.max_new_tokens)
        if run.mode in DRAFTER_MODES and self.drafter is None:
            self.drafter = self.load_drafter(run)
        if run.gamma_auto:  # caches sized for the largest gammas the tuner may pick
            caps = auto_caps(len(mode_levels(run, 1)[0]), run.max_new_tokens)
            run = dataclasses.replace(run, gamma="auto", gamma1=max(caps[0], 1), gamma2=max(caps[-1], 1))
        stack, gammas = self.build_stack(run, run.capacity_for(len(prompt_ids)))
        for level in stack:  # any level's passes may stream weights; the target's also KV
            level.traffic = self.copier.traffic if self.copier else None
        try:
            return self._generate(stack, gammas, prompt_ids, run, on_tokens, on_prefill)
        finally:
            if hasattr(stack[-1].cache, "close"):  # an offloaded cache returns its host-tier arenas
                stack[-1].cache.close()
            if self.keep_prefill:
                self._settled_prefill()   # a request that ran on the saved prefill in place leaves it whole

    def _generate(self, stack, gammas, prompt_ids, run, on_tokens, on_prefill) -> Result:
        generator = torch.Generator(device=self.device).manual_seed(run.seed)
        reused, prefill_s = timed(self.prefill, stack, prompt_ids, on_prefill, device=self.device)
        tuner = None
        if run.gamma_auto and len(stack) > 1:
            caps = auto_caps(len(stack), run.max_new_tokens)
            key = pass_cost_key(run, len(prompt_ids), caps)
            known = self.pass_costs.get(key) or (load_costs(key, len(stack)) if self.stored_costs else None)
            tuner = GammaTuner.start(stack, caps, run.max_new_tokens, known=known, copies=run.lookup)
            gammas = list(tuner.gammas)
        decoder = self.decoder(stack, gammas, list(prompt_ids), generator,
                               chain(rebuild_policy(run, len(prompt_ids)), tuner))
        if tuner:
            decoder.copy_cap = tuner.copy_cap()
            decoder.extend = tuner.extension()
        decoder.lookup = ContextLookup() if run.lookup and len(stack) > 1 else None
        gen, decode_s = timed(decode, decoder, run.max_new_tokens, self.cfg.eos_token_ids, on_tokens,
                              device=self.device)
        if tuner:
            self.pass_costs[key] = tuner.costs
            if self.stored_costs:
                save_costs(key, tuner.costs)
        n = len(gen.token_ids)
        placement = self.placement.for_request(run.on_chip_layers)
        target_passes = stack[-1].stats.passes
        stats = dict(prefill_s=round(prefill_s, 4), decode_s=round(decode_s, 4),
                     tokens_per_s=round(n / decode_s, 3) if decode_s > 0 else None,
                     ms_per_token=round(1000 * decode_s / n, 3) if n else None,
                     prefill_tokens_per_s=round(len(prompt_ids) / prefill_s, 1) if prefill_s > 0 else None,
                     prefill_reused=reused or 0,
                     new_tokens=n, dtype=self.dtype, device=str(self.device),
                     target_passes=target_passes,
                     tokens_per_target_pass=round(n / target_passes, 3) if target_passes else None,
                     **level_stats(stack), **offload_stats(stack, n, placement), **(tuner.stats() if tuner else {}),
                     placement=placement.stats({level.name: level.role for level in stack}))
        text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        return Result(str(self.model_dir), run.mode, len(prompt_ids), gen.token_ids, text, gen.stopped_by, stats)


DRAFTER_MODES = ("spec", "triforce")


def pass_cost_key(run: RunConfig, context: int, caps: tuple[int, ...]) -> tuple:
    """What a request's pass costs depend on, for --gamma auto to reuse those of an earlier request
    on the same engine instead of probing again (a batch job's records, a coordinator's requests):
    the run's shape without its sampling, prompt and length, the γ caps, the threads, and the
    context within 1/8 of an octave (±4%; the tuner rescales the costs by the run's own passes)."""
    shape = dataclasses.replace(run, max_new_tokens=0, temperature=0.0, top_p=1.0, top_k=0, seed=0, chat=False,
                                prompt=None, prompt_file=None, kjv_books=(), question=None)
    return shape, caps, torch.get_num_threads(), run.budget_for(context), round(8 * math.log2(max(context, 1)))


_ARENA_IDS = itertools.count()


def offload_stats(stack: list[Level], new_tokens: int, placement: Placement) -> dict:
    """Host<->device traffic per generated token, per level (empty when resident, and on Ray,
    whose shards move their own bytes)."""
    if not (placement.kv_offloaded or placement.weights_streamed) or stack[-1].traffic is None:
        return {}
    per_level = {level.name: round(level.stats.moved_bytes / max(1, new_tokens)) for level in stack}
    return {"offload": dict(on_chip_layers=placement.on_chip_layers, offload_weights=placement.weights_streamed,
                            moved_bytes_per_token=per_level,
                            moved_bytes_per_token_total=sum(per_level.values()))}


def check_same_tokenizer(target_dir: Path, target_tok, draft_dir: Path, draft_cfg: ModelConfig,
                         target_cfg: ModelConfig) -> None:
    """A drafter must speak the target's vocabulary token for token, or acceptance is meaningless."""
    if draft_cfg.vocab_size != target_cfg.vocab_size:
        raise UserError(f"drafter {str(draft_dir)!r} has a vocabulary of {draft_cfg.vocab_size} tokens, the target "
                        f"{str(target_dir)!r} {target_cfg.vocab_size}; a drafter must share the target's tokenizer "
                        "(make one with `triforce distill`)")
    if same_tokenizer_files(target_dir, draft_dir):
        return
    draft_tok = load_tokenizer(draft_dir)
    if draft_tok.get_vocab() != target_tok.get_vocab():
        raise UserError(f"drafter {str(draft_dir)!r} uses a different tokenizer than the target {str(target_dir)!r}; "
                        "a drafter must share the target's tokenizer (make one with `triforce distill`)")


def same_tokenizer_files(a: Path, b: Path) -> bool:
    """Whether two checkpoints hold the same tokenizer files byte for byte (then the drafter's
    tokenizer need not be loaded to compare: ~0.25 s of start-up)."""
    names = ("tokenizer.json", "tokenizer_config.json")
    try:
        return all((a / n).read_bytes() == (b / n).read_bytes() for n in names)
    except OSError:
        return False


def rebuild_retrieval(level: Level, target: Level, keep: int) -> None:
    """Re-selects the retrieval cache from the target's full cache over its first `keep` tokens
    (the committed ones: rejected drafts the target last saw are dropped first)."""
    target.cache.crop(keep)
    target.cached = target.cached[:keep]
    level.cache.fill_from(target.cache, keep)
    level.cached, level.safe = list(target.cached), keep


def rebuild_policy(run: RunConfig, prompt_tokens: int):
    """on_round hook for the decoder: rebuilds the retrieval level as run.retrieval_rebuild says."""
    kind, value = run.rebuild_policy
    if kind == "never" or run.mode not in ("retrieval", "triforce"):
        return None
    since = {"tokens": prompt_tokens, "drafted": 0, "accepted": 0}

    def on_round(decoder) -> None:
        middle, target = decoder.stack[-2], decoder.stack[-1]
        tokens = len(decoder.seq)
        drafted, accepted = target.stats.drafted - since["drafted"], target.stats.accepted - since["accepted"]
        due = (kind == "every" and tokens - since["tokens"] >= value) or \
              (kind == "below" and drafted >= 4 * run.gammas[1] and accepted / drafted < value)
        if due:
            rebuild_retrieval(middle, target, target.safe)
            middle.stats.rebuilds += 1
            since.update(tokens=tokens, drafted=target.stats.drafted, accepted=target.stats.accepted)

    return on_round
