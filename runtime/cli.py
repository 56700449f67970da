"""`triforce` command line. Flags and JSON keys here are a contract users script against:
add, never rename."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from runtime.config import DTYPES, MODES, WEIGHT_KINDS, RunConfig, load_run_config
from runtime.errors import UserError


def _add_generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file of run settings (flags override it)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt text (UTF-8)")
    p.add_argument("--question", help="a question asked about the prompt's text (placed before and after it)")
    add_run_args(p)
    p.add_argument("--backend", choices=("local", "ray"), help="local (default): this process; ray: shard actors "
                   "and a coordinator actor on a Ray cluster (see README, Ray)")
    p.add_argument("--tp", type=int, help="ray: tensor-parallel shards per pipeline stage (divides the KV heads)")
    p.add_argument("--pp", type=int, help="ray: pipeline stages (layer ranges)")
    p.add_argument("--ray-address", help="ray: cluster address (default: $RAY_ADDRESS, else a local cluster)")
    p.add_argument("--json", help="write the result (token ids, text, stats) to this JSON file")
    p.add_argument("--quiet", action="store_true", help="do not stream text to stdout")


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
    p.add_argument("--prefill-chunk", type=int, help="prompt tokens per prefill forward pass")
    p.add_argument("--rope-scaling", help="extend the context: TYPE:FACTOR with TYPE linear|dynamic|yarn, e.g. yarn:4")
    p.add_argument("--draft-model", help="drafter checkpoint sharing the target's tokenizer (modes spec, triforce; "
                   "default: the embedded drafter of the default target)")
    p.add_argument("--gamma1", type=int, help="tokens the drafter proposes per round to the middle level (triforce)")
    p.add_argument("--gamma2", type=int, help="tokens proposed per round to the full target")
    p.add_argument("--retrieval-budget", type=int, help="middle-level KV budget in tokens")
    p.add_argument("--chunk-size", type=int, help="retrieval chunk length in tokens")
    p.add_argument("--retrieval-recent", type=int, help="tokens at the end of the context the retrieval cache always keeps")
    p.add_argument("--retrieval-rebuild", help="never | every:N | below:X")
    p.add_argument("--middle-weights", choices=WEIGHT_KINDS, help="middle (retrieval) level on a weight-only "
                   "quantized copy of the target (retrieval, triforce); the full target keeps its own weights")
    p.add_argument("--draft-weights", choices=WEIGHT_KINDS, help="drafter on a weight-only quantized copy "
                   "(spec, triforce)")
    p.add_argument("--draft-vocab", type=int, help="drafter head pruned to the N most frequent tokens of its "
                   "distillation corpus (0 = full vocabulary); output stays exact")
    p.add_argument("--draft-window", type=int, help="drafter StreamingLLM recent window")
    p.add_argument("--draft-sinks", type=int, help="drafter StreamingLLM sink tokens")
    p.add_argument("--on-chip-layers", type=int, help="layers whose full KV cache stays on the device; the rest "
                   "live in the host tier and stream in per layer (default: all on the device)")
    p.add_argument("--offload-weights", action="store_true", default=None,
                   help="keep decoder-layer weights in the host tier, streamed one layer ahead of compute")
    p.add_argument("--offload", choices=("none", "auto"), help="auto: place KV and weights as `triforce plan` says")


RUN_FLAGS = ("model", "chat", "max_new_tokens", "mode", "temperature", "top_p", "top_k", "seed", "dtype", "device",
             "prefill_chunk", "rope_scaling", "draft_model", "gamma1", "gamma2", "retrieval_budget", "chunk_size",
             "retrieval_recent", "retrieval_rebuild", "middle_weights", "draft_weights", "draft_vocab",
             "draft_window", "draft_sinks", "on_chip_layers", "offload_weights", "offload")  # the RunConfig keys add_run_args fills


def run_config_from_args(args: argparse.Namespace) -> RunConfig:
    keys = RUN_FLAGS + ("prompt", "prompt_file", "question", "backend", "tp", "pp", "ray_address")
    return load_run_config(args.config, **{k: getattr(args, k) for k in keys})


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
        from runtime.assets import kjv_books
        text = kjv_books(list(run.kjv_books))
    else:
        raise UserError("no prompt: pass --prompt TEXT or --prompt-file PATH")
    if run.question:  # asked before and after the context: small models lose a question asked only once
        text = f"{run.question}\n\n{text}\n\n{run.question}"
    return text


class TextStream:
    """Prints decoded text as tokens arrive, holding back incomplete UTF-8 sequences."""

    def __init__(self, tokenizer, out=None):
        self.tokenizer, self.out, self.ids, self.printed = tokenizer, out or sys.stdout, [], 0

    def __call__(self, new_ids: list[int]) -> None:
        self.ids += new_ids
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        self.out.write(text[self.printed:])
        self.out.flush()
        self.printed = len(text)

    def close(self) -> None:
        self.out.write("\n")
        self.out.flush()


def progress(message: str) -> None:
    end = "\r" if sys.stderr.isatty() else "\n"
    print(f"[triforce] {message}", file=sys.stderr, end=end, flush=True)


def summary_line(result) -> str:
    s = result.stats
    line = (f"mode={result.mode} prompt={result.prompt_tokens} tokens | prefill {s['prefill_s']:.2f} s "
            f"({s['prefill_tokens_per_s']} tok/s) | decode {s['new_tokens']} tokens in {s['decode_s']:.2f} s "
            f"= {s['tokens_per_s']} tok/s ({s['ms_per_token']} ms/token) | stopped by {result.stopped_by}")
    levels = s.get("levels", {})
    if len(levels) > 1:
        parts = [f"{name} accepted {lv['accepted']}/{lv['drafted']} ({lv.get('acceptance', 0):.0%})"
                 for name, lv in levels.items() if lv["drafted"]]
        times = ", ".join(f"{name} {lv['seconds']:.2f} s" + (f" ({lv['weights']})" if lv.get("weights", "same") != "same"
                                                            else "") for name, lv in levels.items())
        line += (f"\n[triforce] {'; '.join(parts)} | {s['tokens_per_target_pass']} tokens per target pass"
                 f" | time per level: {times}")
    off = s.get("offload")
    if off:
        moved = ", ".join(f"{name} {b / 1e6:.1f}" for name, b in off["moved_bytes_per_token"].items())
        line += (f"\n[triforce] offload: KV of {off['on_chip_layers']} layers on the device, weights "
                 f"{'streamed' if off['offload_weights'] else 'on the device'} | MB moved per token: {moved}")
    return line


def cmd_generate(args: argparse.Namespace) -> int:
    from runtime.engine import open_engine
    run = run_config_from_args(args)
    text = prompt_text(run)
    engine = open_engine(run)
    prompt_ids = engine.encode(text, chat=run.chat)
    engine.check_length(len(prompt_ids), run.max_new_tokens)
    progress(f"model {engine.model_dir} ({run.dtype}, {engine.device}); prompt {len(prompt_ids)} tokens; "
             f"mode {run.mode}")
    stream = None if args.quiet else TextStream(engine.tokenizer)
    result = engine.generate(prompt_ids, run, on_tokens=stream,
                             on_prefill=lambda n: progress(f"prefill {n}/{len(prompt_ids)} tokens"))
    if stream:
        stream.close()
    print(f"[triforce] {summary_line(result)}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triforce", description="TriForce long-context speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text from a prompt")
    _add_generate_args(gen)
    gen.set_defaults(func=cmd_generate)
    from runtime.bench import add_bench_parser
    from runtime.distill import add_distill_parser
    add_distill_parser(sub)
    add_bench_parser(sub)
    from offload.plan import add_plan_parser
    add_plan_parser(sub)
    from runtime.batch import add_batch_parser
    add_batch_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UserError as e:
        print(f"triforce: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("triforce: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
