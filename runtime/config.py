"""Frozen configuration: the model's architecture (read from config.json) and a run's settings.

YAML and command-line flags only fill these dataclasses; derived values are properties.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from triforce.runtime.errors import UserError

# Architectures our model code implements exactly; anything else is refused by name.
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn")


@dataclass(frozen=True)
class ModelConfig:
    architecture: str          # e.g. "LlamaForCausalLM"
    vocab_size: int            # V
    hidden_size: int           # E
    intermediate_size: int     # F
    num_layers: int            # L
    num_heads: int             # H
    num_kv_heads: int          # Hkv (H when the checkpoint has no GQA)
    head_dim: int              # D
    max_position_embeddings: int  # positions the checkpoint was trained for (after its own RoPE scaling)
    rms_norm_eps: float        # RMSNorm epsilon
    rope_theta: float          # RoPE base
    rope_scaling: dict | None  # HF rope_scaling dict ({"rope_type": ..., "factor": ...}) or None
    tie_word_embeddings: bool  # lm_head shares the embedding matrix
    qkv_bias: bool             # q/k/v projections carry a bias (Qwen2, Llama attention_bias)
    o_bias: bool               # o_proj carries a bias (Llama attention_bias only)
    mlp_bias: bool             # MLP projections carry biases (Llama mlp_bias)
    sliding_window: int | None # Mistral-style local attention window; we refuse contexts beyond it
    eos_token_ids: tuple[int, ...] = ()  # generation stops on any of these
    bos_token_id: int | None = None      # prepended by the tokenizer when it does so itself

    @property
    def group_size(self) -> int:
        """G: query heads per KV head."""
        return self.num_heads // self.num_kv_heads

    @property
    def rope_type(self) -> str:
        if not self.rope_scaling:
            return "default"
        return self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))

    @property
    def max_context(self) -> int:
        """Longest context (prompt + new tokens) this configuration supports. Checkpoints with
        dynamic NTK scaling state their original length and stretch it by the factor."""
        if self.rope_type == "dynamic" and "original_max_position_embeddings" not in self.rope_scaling:
            return int(self.max_position_embeddings * self.rope_scaling["factor"])
        return self.max_position_embeddings

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Bytes of K and V one token occupies across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes

    @staticmethod
    def from_dir(model_dir: str | Path) -> "ModelConfig":
        return model_config_from_dict(read_config_json(model_dir), str(Path(model_dir) / "config.json"))


def read_config_json(model_dir: str | Path) -> dict:
    model_dir = Path(model_dir)
    if not model_dir.exists():
        raise UserError(f"model directory {str(model_dir)!r} does not exist; pass --model DIR with a "
                        "Hugging Face checkpoint (config.json + *.safetensors), or omit --model for the default")
    if not model_dir.is_dir():
        raise UserError(f"--model {str(model_dir)!r} is a file; pass the checkpoint directory that holds it")
    path = model_dir / "config.json"
    if not path.exists():
        found = ", ".join(sorted(p.name for p in model_dir.iterdir())[:8]) or "nothing"
        raise UserError(f"{str(model_dir)!r} has no config.json (found: {found}); pass a Hugging Face "
                        "checkpoint directory")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{path} is not valid JSON ({e}); re-export the checkpoint") from None


def _rope_fields(raw: dict) -> tuple[float, dict | None]:
    """RoPE base and scaling from either the classic (rope_theta + rope_scaling) or the
    transformers-5 (rope_parameters) form of config.json."""
    params = raw.get("rope_parameters") or {}
    scaling = raw.get("rope_scaling") or None
    if params and params.get("rope_type", "default") != "default":
        scaling = dict(params)
    theta = float(raw.get("rope_theta", params.get("rope_theta", 10000.0)))
    if scaling is not None:
        scaling = {k: v for k, v in scaling.items() if k != "rope_theta"}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in ROPE_TYPES:
            raise UserError(f"RoPE scaling type {kind!r} is not supported; supported: {', '.join(ROPE_TYPES)}")
        if kind == "default":
            scaling = None
    return theta, scaling


def model_config_from_dict(raw: dict, source: str = "config.json") -> ModelConfig:
    """The ModelConfig of a Hugging Face config.json's contents; a file that is not one (not an
    object, a required field missing or malformed) is a UserError naming `source` and the field."""
    if not isinstance(raw, dict):
        raise UserError(f"{source} holds a JSON {type(raw).__name__}, not an object; pass a model's config.json")
    try:
        return _model_config(raw)
    except KeyError as e:
        raise UserError(f"{source} lacks {e.args[0]!r}, which a Llama-family config.json has; "
                        "is it a model's config.json?") from None
    except (TypeError, ValueError) as e:
        raise UserError(f"{source} has a field of the wrong kind ({e}); is it a model's config.json?") from None


def _model_config(raw: dict) -> ModelConfig:
    archs = raw.get("architectures") or [raw.get("model_type", "?")]
    arch = archs[0]
    if arch not in SUPPORTED_ARCHITECTURES:
        raise UserError(f"architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")
    heads = int(raw["num_attention_heads"])
    theta, scaling = _rope_fields(raw)
    eos = raw.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
    is_qwen2 = arch == "Qwen2ForCausalLM"
    attention_bias = bool(raw.get("attention_bias", False))
    window = raw.get("sliding_window") if (not is_qwen2 or raw.get("use_sliding_window")) else None
    return ModelConfig(
        architecture=arch,
        vocab_size=int(raw["vocab_size"]),
        hidden_size=int(raw["hidden_size"]),
        intermediate_size=int(raw["intermediate_size"]),
        num_layers=int(raw["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads") or heads),
        head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
        max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_scaling=scaling,
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        qkv_bias=is_qwen2 or attention_bias,
        o_bias=attention_bias and not is_qwen2,
        mlp_bias=bool(raw.get("mlp_bias", False)),
        sliding_window=int(window) if window else None,
        eos_token_ids=eos_ids,
        bos_token_id=raw.get("bos_token_id"),
    )


def with_rope_scaling(cfg: ModelConfig, spec: str | None) -> ModelConfig:
    """Extend a model's context with RoPE scaling given as TYPE:FACTOR (linear, dynamic or yarn)."""
    if not spec:
        return cfg
    kind, _, factor_s = spec.partition(":")
    try:
        factor = float(factor_s)
    except ValueError:
        factor = float("nan")
    if kind not in ("linear", "dynamic", "yarn") or not math.isfinite(factor) or factor <= 1:
        raise UserError(f"--rope-scaling {spec!r}: expected TYPE:FACTOR with TYPE linear, dynamic or yarn "
                        "and FACTOR > 1, e.g. yarn:4")
    if cfg.rope_scaling:
        raise UserError(f"--rope-scaling {spec!r}: the checkpoint already uses {cfg.rope_type} RoPE scaling; "
                        "stacking a second one is not supported")
    scaling = {"rope_type": kind, "factor": factor, "original_max_position_embeddings": cfg.max_position_embeddings}
    return dataclasses.replace(cfg, rope_scaling=scaling,
                               max_position_embeddings=int(cfg.max_position_embeddings * factor))


DTYPES = ("fp32", "bf16", "fp16")
BACKENDS = ("local", "ray")
MODES = ("ar", "spec", "retrieval", "streaming", "triforce")  # see runtime/speculate.py
WEIGHT_KINDS = ("same", "int8", "int4")  # lower levels' weights (runtime/quant.py)
GAMMAS = (2, 6)  # gamma1, gamma2 when gamma is fixed and they are not set
AUTO_DRAFT_VOCAB = 4096  # the drafter head's size when draft_vocab is auto (RunConfig.lower_levels)
AUTO_BUDGET = (1024, 4096)  # the retrieval budget RunConfig.budget_for picks when none is set: its bounds
AUTO_BUDGET_SHARE = (4096, 60_000)  # ... and its share of the context (budget tokens per context tokens)


@dataclass(frozen=True)
class RunConfig:
    model: str | None = None        # target checkpoint directory; None = the embedded default (SmolLM2-135M)
    dtype: str = "fp32"             # weights and KV dtype: fp32 | bf16 | fp16
    device: str = "auto"            # "auto" (cuda if available, else cpu), "cpu", "cuda", "cuda:1", ...
    cuda_graphs: bool = True        # on CUDA, the lower levels' passes of up to 16 tokens and the target's 1-token ones replay
                                    # (runtime/graphs.py); False: every pass runs eagerly
    mode: str = "ar"                # decoding mode (see MODES)
    lookup: bool = True             # speculative modes: a verifier also takes drafts copied from the sequence
                                    # where its end repeats an earlier place (runtime/lookup.py); False: off
    max_new_tokens: int = 256       # tokens generated after the prompt (fewer if EOS comes first)
    temperature: float = 0.0        # 0 = greedy (exact argmax)
    top_p: float = 1.0              # nucleus sampling mass, (0, 1]
    top_k: int = 0                  # keep the k most likely tokens; 0 = off
    seed: int = 0                   # seeds the sampler's torch.Generator
    prefill_chunk: int = 1024       # prompt tokens per prefill forward; bounds activation memory
    rope_scaling: str | None = None # TYPE:FACTOR to extend the context, e.g. yarn:4 (see README)
    chat: bool = False              # wrap the prompt in the tokenizer's chat template
    prompt: str | None = None       # prompt text (the CLI's --prompt)
    prompt_file: str | None = None  # file holding the prompt (the CLI's --prompt-file)
    prompt_cache: str | None = None # generate: file keeping the prompt's prefill between runs (runtime/prompt_cache.py)
    kjv_books: tuple[str, ...] = () # prompt = these books of the embedded KJV (long-context demo jobs)
    question: str | None = None     # asked before and after the prompt's text (long-context QA jobs)
    # --- speculation (modes spec, retrieval, streaming, triforce) ---
    draft_model: str | None = None  # drafter checkpoint; None = the embedded drafter of the default target
    gamma1: int | None = None       # tokens the drafter proposes per round to the middle level (triforce;
                                    # None: GAMMAS[0], `gammas`)
    gamma2: int | None = None       # tokens proposed per round to the full target (all speculative modes; None: GAMMAS[1])
    gamma: str | None = None        # fixed: gamma1/gamma2 as given | auto: chosen each round from pass costs
                                    # measured at start-up and the running acceptance (runtime/gamma.py);
                                    # None: gamma_auto decides (auto for greedy requests without gammas set)
    draft_sinks: int = 16           # drafter StreamingLLM cache: sink tokens
    draft_window: int = 240         # drafter StreamingLLM cache: recent tokens
    retrieval_budget: int | None = None  # middle-level KV budget in tokens (also the `streaming` mode's cache);
                                         # None: from the context (budget_for)
    chunk_size: int = 8             # retrieval chunk length in tokens
    retrieval_recent: int | None = None  # of the budget, tokens at the end of the context always kept
                                         # (None: min(256, budget // 4))
    retrieval_rebuild: str = "never"  # never | every:N (tokens) | below:X (acceptance over recent rounds)
    middle_weights: str = "auto"    # the middle (retrieval) level's weights: same | int8 | int4 (a quantized copy)
                                    # | auto (lower_levels: int4 where that was measured faster, else same)
    draft_weights: str = "auto"     # the drafter's weights: same | int8 | int4 | auto (as middle_weights)
    draft_vocab: int | str = "auto" # drafter head pruned to the N most frequent corpus tokens; 0 = full vocabulary;
                                    # auto: AUTO_DRAFT_VOCAB where the lower levels are int4 and the drafter
                                    # recorded its corpus's counts, else 0 (lower_levels)
    # --- offloading (offload/) ---
    on_chip_layers: int | None = None  # layers whose full KV stays on the device; the rest live in the
                                       # host tier and stream per layer (None = all on the device)
    offload_weights: bool = False   # decoder-layer weights in the host tier, streamed one layer ahead
    offload: str = "none"           # none | auto: place KV and weights as `triforce plan` says for this machine
    # --- batch jobs (`triforce batch`) ---
    batch_size: int = 1             # sequences one replica decodes together (model passes packed across them)
    prefix_cache: bool = False      # a replica keeps its last prompt's prefill and copies the start a later prompt
                                    # shares with it, in whole prefill passes (bit for bit; one more KV copy held)
    # --- backend ---
    backend: str = "local"          # local (this process) | ray (shard actors + a coordinator actor)
    tp: int = 1                     # ray: tensor-parallel shards per stage (must divide the KV heads)
    pp: int = 1                     # ray: pipeline stages (even layer ranges)
    ray_address: str | None = None  # ray: cluster to join (None: $RAY_ADDRESS, else start a local one)
    ray_cpus: float = 1.0           # ray: CPUs reserved per shard actor and for the coordinator
    ray_retries: int = 2            # ray: shard restarts allowed per step before the request fails

    @property
    def gammas(self) -> tuple[int, int]:
        """(gamma1, gamma2) as set, else GAMMAS (under gamma auto: the tuner's caps, set by the engine)."""
        return (GAMMAS[0] if self.gamma1 is None else self.gamma1, GAMMAS[1] if self.gamma2 is None else self.gamma2)

    @property
    def gamma_auto(self) -> bool:
        """Whether the gammas are chosen from measured pass costs. `gamma` unset: fixed if gamma1 or
        gamma2 is set (what such runs did before auto became a default), else auto for greedy
        requests, whose tokens no gamma changes, and fixed for sampled ones: the tuner's choices
        follow timings, and with them which random draws a round makes, so a seed reproduces
        sampled output only with fixed gammas (`--gamma auto` trades that for speed)."""
        if self.gamma is not None:
            return self.gamma == "auto"
        return self.gamma1 is None and self.gamma2 is None and self.temperature == 0

    def validate(self) -> "RunConfig":
        if self.dtype not in DTYPES:
            raise UserError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.mode not in MODES:
            raise UserError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.max_new_tokens < 1:
            raise UserError(f"max_new_tokens {self.max_new_tokens} must be at least 1")
        if self.prefill_chunk < 1:
            raise UserError(f"prefill_chunk {self.prefill_chunk} must be at least 1")
        for name in ("gamma1", "gamma2", "draft_window", "chunk_size", "batch_size"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"{name} {getattr(self, name)} must be at least 1")
        budget = self.budget_for(0)   # the budget set, or the smallest one budget_for picks
        if not 0 <= self.recent_for(budget) <= budget // 2:
            raise UserError(f"retrieval_recent {self.retrieval_recent} must be between 0 and half the "
                            f"retrieval_budget ({budget // 2})")
        if self.draft_sinks < 0:
            raise UserError(f"draft_sinks {self.draft_sinks} must be >= 0")
        if budget < 2 * self.chunk_size:
            raise UserError(f"retrieval_budget {budget} must hold at least two chunks of chunk_size {self.chunk_size}")
        for name in ("middle_weights", "draft_weights"):
            if getattr(self, name) not in WEIGHT_KINDS + ("auto",):
                raise UserError(f"{name} {getattr(self, name)!r} is not one of {', '.join(WEIGHT_KINDS)} or auto "
                                "(same = the model's own weights)")
        if self.draft_vocab != "auto" and (isinstance(self.draft_vocab, bool) or not isinstance(self.draft_vocab, int)
                                           or self.draft_vocab < 0):
            raise UserError(f"draft_vocab {self.draft_vocab!r} must be an integer >= 0 (0 = the full vocabulary) or auto")
        lower = self.middle_weights not in ("same", "auto") or self.draft_weights not in ("same", "auto") or \
            self.draft_vocab not in (0, "auto")
        if lower and self.backend == "ray":
            raise UserError("middle_weights, draft_weights and draft_vocab are not wired into --backend ray yet; "
                            "run them with --backend local")
        if self.middle_weights not in ("same", "auto") and (self.offload_weights or self.offload != "none"):
            raise UserError(f"middle_weights {self.middle_weights} with offload_weights / offload auto is not "
                            "supported (the quantized copy needs resident weights); use middle_weights same")
        if self.prompt_cache is not None and self.backend == "ray":
            raise UserError("prompt_cache is not wired into --backend ray yet; run it with --backend local")
        if not isinstance(self.prefix_cache, bool):
            raise UserError(f"prefix_cache {self.prefix_cache!r} must be true or false")
        if self.on_chip_layers is not None and self.on_chip_layers < 0:
            raise UserError(f"on_chip_layers {self.on_chip_layers} must be >= 0 (or unset to keep every layer on the device)")
        if self.gamma not in (None, "fixed", "auto"):
            raise UserError(f"gamma {self.gamma!r} must be fixed (use gamma1/gamma2) or auto")
        if self.offload not in ("none", "auto"):
            raise UserError(f"offload {self.offload!r} must be none or auto")
        if self.backend == "ray" and (self.offload_weights or self.offload != "none"):
            raise UserError("offload_weights and offload auto are not wired into --backend ray yet (on_chip_layers "
                            "is); run them with --backend local")
        if self.backend not in BACKENDS:
            raise UserError(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        for name in ("tp", "pp"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} {getattr(self, name)} must be at least 1")
        if (self.tp > 1 or self.pp > 1) and self.backend != "ray":
            raise UserError(f"--tp {self.tp} --pp {self.pp} need --backend ray (the local backend is one process)")
        if self.ray_retries < 0 or not self.ray_cpus > 0:
            raise UserError(f"ray_retries {self.ray_retries} must be >= 0 and ray_cpus {self.ray_cpus} > 0")
        self.rebuild_policy  # validates
        self.sampling.validate()
        return self

    def capacity_for(self, prompt_tokens: int) -> int:
        """Positions a request of `prompt_tokens` fills at most: the prompt and every new token
        (what its caches are built for, and what `offload: auto` plans)."""
        return prompt_tokens + self.max_new_tokens

    def budget_for(self, context: int) -> int:
        """The middle level's KV budget over `context` tokens: retrieval_budget when set, else
        AUTO_BUDGET_SHARE of the context in whole chunks, at least AUTO_BUDGET[0] and at most
        AUTO_BUDGET[1] tokens. The share is twice the paper's (4K of 120K): at 32K, 2,184 tokens
        made greedy `triforce` 1.14-1.16x faster than 1,088 on two prompts and tied at T = 0.6
        (docs/BENCHMARKS.md, round 29). A budget near the context buys the middle level little
        over the target: at 7K, 4,096 made `triforce` 1.3x slower than 1,024 (round 14)."""
        if self.retrieval_budget is not None:
            return self.retrieval_budget
        low, high = AUTO_BUDGET
        share = context * AUTO_BUDGET_SHARE[0] // AUTO_BUDGET_SHARE[1]
        return min(high, max(low, share)) // self.chunk_size * self.chunk_size

    def lower_levels(self, quantized: bool, counted: bool) -> "RunConfig":
        """This run with its "auto" lower-level settings made concrete (explicit ones are kept).
        `quantized`: the model runs where the native int8/int4 kernels do (avx512_vnni or AVX2);
        `counted`: the drafter recorded its distillation corpus's token counts. There, with the
        local backend and resident weights, auto is what docs/BENCHMARKS.md measured fastest: int4
        copies of the middle level and the drafter, the drafter's head pruned to AUTO_DRAFT_VOCAB
        (at 7K, fp32, greedy: `triforce` 1.85-2.23x `ar` against 1.01-1.04x on the model's own
        weights, docs/BENCHMARKS.md round 19). Elsewhere (a GPU, Ray, offloaded weights, where
        none of it is wired or measured): the model's own weights and the full vocabulary."""
        cheap = quantized and self.backend == "local" and not self.offload_weights and self.offload == "none"
        kind = "int4" if cheap else "same"
        return dataclasses.replace(
            self, middle_weights=kind if self.middle_weights == "auto" else self.middle_weights,
            draft_weights=kind if self.draft_weights == "auto" else self.draft_weights,
            draft_vocab=(AUTO_DRAFT_VOCAB if cheap and counted else 0) if self.draft_vocab == "auto" else self.draft_vocab)

    def recent_for(self, budget: int) -> int:
        """Tokens at the end of the context a retrieval cache of `budget` always keeps."""
        if self.retrieval_recent is None:
            return min(256, budget // 4)
        return self.retrieval_recent

    @property
    def rebuild_policy(self) -> tuple[str, float]:
        """("never", 0) | ("every", N tokens) | ("below", acceptance bound)."""
        kind, _, value = self.retrieval_rebuild.partition(":")
        try:
            if kind == "never" and not value:
                return "never", 0.0
            if kind == "every" and int(value) >= 1:
                return "every", float(int(value))
            if kind == "below" and 0 < float(value) < 1:
                return "below", float(value)
        except ValueError:
            pass
        raise UserError(f"retrieval_rebuild {self.retrieval_rebuild!r}: expected never, every:N (N >= 1 tokens) "
                        "or below:X (0 < X < 1 acceptance)")

    @property
    def sampling(self):
        from triforce.runtime.sampling import SamplingParams
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)


def load_run_config(path: str | Path | None, **overrides: Any) -> RunConfig:
    """RunConfig from a YAML file (optional) with keyword overrides on top (None = not given)."""
    values: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        try:
            loaded = yaml.safe_load(path.read_text()) or {}
        except OSError as e:
            raise UserError(f"cannot read config {str(path)!r}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise UserError(f"config {str(path)!r} is not valid YAML: {e}") from None
        if not isinstance(loaded, dict):
            raise UserError(f"config {str(path)!r} must be a mapping of keys to values")
        values.update(loaded)
    values.update({k: v for k, v in overrides.items() if v is not None})
    if isinstance(values.get("kjv_books"), (list, str)):
        books = values["kjv_books"]
        values["kjv_books"] = tuple(books.split(",") if isinstance(books, str) else books)
    known = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"unknown config key(s) {', '.join(unknown)}; known keys: {', '.join(sorted(known))}")
    return RunConfig(**values).validate()
