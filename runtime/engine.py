"""An Engine holds what outlives one request (models, tokenizer, device) and runs requests:
prompt -> token ids -> checks -> caches -> prefill -> decode -> result. The CLI, batch jobs and
the Ray actors all call Engine.generate.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from runtime.cache_full import FullCache
from runtime.config import ModelConfig, RunConfig, with_rope_scaling
from runtime.errors import UserError
from runtime.generate import ARDecoder, decode, prefill, timed
from runtime.model import load_model


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} requested but CUDA is not available; use --device cpu (or auto)")
    return device


def resolve_model_dir(model: str | None) -> Path:
    if model is None:
        from runtime.assets import default_model_dir
        return default_model_dir()
    return Path(model).expanduser().resolve()


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer
    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as e:
        raise UserError(f"cannot load a tokenizer from {str(model_dir)!r} ({str(e).splitlines()[0]}); "
                        "the checkpoint directory needs tokenizer.json or tokenizer.model") from None


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


class Engine:
    def __init__(self, run: RunConfig):
        self.model_dir = resolve_model_dir(run.model)
        self.cfg: ModelConfig = with_rope_scaling(ModelConfig.from_dir(self.model_dir), run.rope_scaling)
        self.device = resolve_device(run.device)
        self.tokenizer = load_tokenizer(self.model_dir)
        self.model = load_model(self.model_dir, run.dtype, self.device, self.cfg)
        self.dtype = run.dtype

    def encode(self, text: str, chat: bool = False) -> list[int]:
        if not text or not text.strip():
            raise UserError("the prompt is empty; pass --prompt TEXT or --prompt-file PATH with some text")
        if chat:
            if not getattr(self.tokenizer, "chat_template", None):
                raise UserError(f"the tokenizer of {str(self.model_dir)!r} has no chat template; drop --chat")
            ids = self.tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                                     add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
        return self.tokenizer.encode(text)

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

    def generate(self, prompt_ids: list[int], run: RunConfig,
                 on_tokens: Callable[[list[int]], None] | None = None,
                 on_prefill: Callable[[int], None] | None = None) -> Result:
        self.check_length(len(prompt_ids), run.max_new_tokens)
        capacity = len(prompt_ids) + run.max_new_tokens
        rope = self.model.rope(capacity)
        cache = FullCache(self.cfg, rope, 1, capacity, self.device, self.model.dtype)
        tokens = torch.tensor([prompt_ids], device=self.device)  # [1, T]
        generator = torch.Generator(device=self.device).manual_seed(run.seed)
        last_logits, prefill_s = timed(prefill, self.model, tokens, cache, run.prefill_chunk, on_prefill,
                                       device=self.device)
        decoder = ARDecoder(self.model, cache, last_logits, run.sampling, generator)
        gen, decode_s = timed(decode, decoder, run.max_new_tokens, self.cfg.eos_token_ids, on_tokens,
                              device=self.device)
        n = len(gen.token_ids)
        stats = dict(prefill_s=round(prefill_s, 4), decode_s=round(decode_s, 4),
                     tokens_per_s=round(n / decode_s, 3) if decode_s > 0 else None,
                     ms_per_token=round(1000 * decode_s / n, 3) if n else None,
                     prefill_tokens_per_s=round(len(prompt_ids) / prefill_s, 1) if prefill_s > 0 else None,
                     new_tokens=n, dtype=self.dtype, device=str(self.device), **gen.stats)
        text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        return Result(str(self.model_dir), run.mode, len(prompt_ids), gen.token_ids, text, gen.stopped_by, stats)
