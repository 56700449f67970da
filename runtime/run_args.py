"""The run flags `generate` and `batch` share (argparse), and how they become a RunConfig and a
prompt: the applications' common ground, below the `triforce` entry point (cli) that registers
them, so that batch and its replicas need not import the CLI."""
from __future__ import annotations

import argparse
from pathlib import Path

from triforce.runtime.config import DTYPES, MODES, WEIGHT_KINDS, RunConfig, load_run_config
from triforce.runtime.errors import UserError
from triforce.runtime.flags import RUN_FLAGS


def add_run_args(p: argparse.ArgumentParser) -> None:
    """The model, mode, sampling, speculation and offload flags: `generate` and `batch` share them."""
    p.add_argument("--model", help="Hugging Face checkpoint directory (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--chat", action="store_true", default=None, help="wrap the prompt in the tokenizer's chat template")
    p.add_argument("--max-new-tokens", type=int)
    p.add_argument("--mode", choices=MODES)
    p.add_argument("--temperature", type=float, help="0 = greedy (exact argmax)")
    p.add_argument("--top-p", type=float)
    p.add_argument("--top-k", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--dtype", choices=DTYPES)
    p.add_argument("--device", help="auto (default), cpu, cuda, cuda:N")
    p.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false", default=None,
                   help="on CUDA, run every pass eagerly (by default the drafter's and the middle level's passes "
                   "of up to 16 tokens, and the target's 1-token passes, replay from CUDA graphs)")
    p.add_argument("--no-lookup", dest="lookup", action="store_false", default=None,
                   help="speculative modes: no drafts copied from the sequence itself (by default, where the "
                   "sequence's end repeats an earlier place, a verifier takes the tokens that followed there as "
                   "its draft: lossless, and no model runs to propose them)")
    p.add_argument("--prefill-chunk", type=int, help="prompt tokens per prefill forward pass")
    p.add_argument("--rope-scaling", help="extend the context: TYPE:FACTOR with TYPE linear|dynamic|yarn, e.g. yarn:4")
    p.add_argument("--draft-model", help="drafter checkpoint sharing the target's tokenizer (modes spec, triforce; "
                   "default: the embedded drafter of the default target)")
    p.add_argument("--gamma1", type=int, help="tokens the drafter proposes per round to the middle level (triforce; "
                   "setting it or --gamma2 without --gamma means --gamma fixed)")
    p.add_argument("--gamma2", type=int, help="tokens proposed per round to the full target")
    p.add_argument("--gamma", choices=("fixed", "auto"), help="auto: pick gamma1/gamma2 each round from pass costs "
                   "measured at start-up and the running acceptance (0 = that level off; the choice is in stats.gamma); "
                   "fixed: --gamma1/--gamma2, default 2 and 6. Unset: auto for greedy requests, fixed for sampled ones "
                   "(so a seed reproduces them) and whenever --gamma1/--gamma2 are set")
    p.add_argument("--retrieval-budget", type=int,
                   help="middle-level KV budget in tokens (default: about 6.8%% of the context, 1024-4096)")
    p.add_argument("--chunk-size", type=int, help="retrieval chunk length in tokens")
    p.add_argument("--retrieval-recent", type=int, help="tokens at the end of the context the retrieval cache always keeps")
    p.add_argument("--retrieval-rebuild", help="never | every:N | below:X")
    p.add_argument("--middle-weights", choices=WEIGHT_KINDS + ("auto",), help="middle (retrieval) level on a weight-only "
                   "quantized copy of the target (retrieval, triforce); the full target keeps its own weights. "
                   "auto (default): int4 on a CPU with the native int8/int4 kernels (local backend, resident "
                   "weights), else same")
    p.add_argument("--draft-weights", choices=WEIGHT_KINDS + ("auto",), help="drafter on a weight-only quantized copy "
                   "(spec, triforce); auto (default) as --middle-weights")
    p.add_argument("--draft-vocab", type=draft_vocab_arg, help="drafter head pruned to the N most frequent tokens of its "
                   "distillation corpus (0 = full vocabulary); output stays exact. auto (default): 4096 where the "
                   "lower levels are int4 and the drafter recorded its corpus's counts, else 0")
    p.add_argument("--draft-window", type=int, help="drafter StreamingLLM recent window")
    p.add_argument("--draft-sinks", type=int, help="drafter StreamingLLM sink tokens")
    p.add_argument("--on-chip-layers", type=int, help="layers whose full KV cache stays on the device; the rest "
                   "live in the host tier and stream in per layer (default: all on the device)")
    p.add_argument("--offload-weights", action="store_true", default=None,
                   help="keep decoder-layer weights in the host tier, streamed one layer ahead of compute")
    p.add_argument("--offload", choices=("none", "auto"), help="auto: place KV and weights as `triforce plan` says")


def draft_vocab_arg(text: str) -> int | str:
    """--draft-vocab: N or auto."""
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number of tokens nor auto") from None


GENERATE_KEYS = ("prompt", "prompt_file", "prompt_cache", "question", "backend", "tp", "pp", "ray_address")  # generate's own flags


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    return load_run_config(args.config, **{k: getattr(args, k) for k in RUN_FLAGS + GENERATE_KEYS})


def prompt_text(run: RunConfig) -> str:
    if run.prompt is not None:
        text = run.prompt
    elif run.prompt_file is not None:
        path = Path(run.prompt_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"prompt file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read prompt file {str(path)!r} as UTF-8 text: {e}") from None
    elif run.kjv_books:
        from triforce.runtime.assets import kjv_books
        text = kjv_books(list(run.kjv_books))
    else:
        raise UserError("no prompt: pass --prompt TEXT or --prompt-file PATH")
    if run.question:  # asked before and after the context: small models lose a question asked only once
        text = f"{run.question}\n\n{text}\n\n{run.question}"
    return text
