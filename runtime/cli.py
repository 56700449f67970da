"""`triforce` command line. Flags and JSON keys here are a contract users script against:
add, never rename."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from triforce.runtime.errors import UserError
from triforce.runtime.run_args import add_run_args, prompt_text, run_config_from_args  # noqa: F401 -- public
from triforce.runtime.io_utils import ProgressLine


def _add_generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file of run settings (flags override it)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", help="file holding the prompt text (UTF-8)")
    p.add_argument("--question", help="a question asked about the prompt's text (placed before and after it)")
    p.add_argument("--prompt-cache", help="file keeping the prompt's prefill between runs: a later prompt that starts "
                   "the same way (the same document, another question after it) copies that part instead of computing it")
    add_run_args(p)
    p.add_argument("--backend", choices=("local", "ray"), help="local (default): this process; ray: shard actors "
                   "and a coordinator actor on a Ray cluster (see README, Ray)")
    p.add_argument("--tp", type=int, help="ray: tensor-parallel shards per pipeline stage (divides the KV heads)")
    p.add_argument("--pp", type=int, help="ray: pipeline stages (layer ranges)")
    p.add_argument("--ray-address", help="ray: cluster address (default: $RAY_ADDRESS, else a local cluster)")
    p.add_argument("--json", help="write the result (token ids, text, stats) to this JSON file")
    p.add_argument("--quiet", action="store_true", help="do not stream text to stdout")


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


def summary_line(result) -> str:
    s = result.stats
    line = (f"mode={result.mode} prompt={result.prompt_tokens} tokens | prefill {s['prefill_s']:.2f} s "
            f"({s['prefill_tokens_per_s']} tok/s) | decode {s['new_tokens']} tokens in {s['decode_s']:.2f} s "
            f"= {s['tokens_per_s']} tok/s ({s['ms_per_token']} ms/token) | stopped by {result.stopped_by}")
    levels = s.get("levels", {})
    if len(levels) > 1:
        parts = [f"{name} accepted {lv['accepted']}/{lv['drafted']} ({lv.get('acceptance', 0):.0%})"
                 for name, lv in levels.items() if lv["drafted"]]
        parts += [f"{name} took copies {lv['copied_accepted']}/{lv['copied']}"   # context lookup (lookup.py)
                  for name, lv in levels.items() if lv.get("copied")]
        parts += [f"{name} took {lv['extended_accepted']}/{lv['extended']} drafts past gamma while sure"   # speculate.Extension
                  for name, lv in levels.items() if lv.get("extended")]
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


def planned_context(run, text: str) -> int | None:
    """Prompt + new tokens: the context `offload: auto` plans the placement for, before the model
    loads (None without `auto`: nothing to plan)."""
    if run.offload != "auto":
        return None
    from triforce.runtime.engine import encode, load_tokenizer, resolve_model_dir
    model_dir = resolve_model_dir(run.model)
    return run.capacity_for(len(encode(load_tokenizer(model_dir), model_dir, text, run.chat)))


def cmd_generate(args: argparse.Namespace) -> int:
    from triforce.offload.tier import remove_dead_segments
    from triforce.runtime.backends import open_engine
    remove_dead_segments()   # host-tier arenas of killed runs
    run = run_config_from_args(args)
    text = prompt_text(run)
    engine = open_engine(run, context=planned_context(run, text))
    prompt_ids = engine.encode(text, chat=run.chat)
    engine.check_length(len(prompt_ids), run.max_new_tokens)
    line = ProgressLine(every_s=0)   # redrawn on a terminal, one line each in a log
    line.show(f"[triforce] model {engine.model_dir} ({run.dtype}, {engine.device}); prompt {len(prompt_ids)} "
              f"tokens; mode {run.mode}")
    stream = None if args.quiet else TextStream(engine.tokenizer)

    def on_tokens(ids: list[int]) -> None:
        line.close()   # the text starts on its own line
        if stream:
            stream(ids)

    if run.prompt_cache:
        from triforce.runtime.prompt_cache import load_prompt_cache
        engine.keep_prefill = True
        load_prompt_cache(engine, Path(run.prompt_cache).expanduser(), run.prefill_chunk)
    result = engine.generate(prompt_ids, run, on_tokens=on_tokens,
                             on_prefill=lambda n: line.show(f"[triforce] prefill {n}/{len(prompt_ids)} tokens"))
    line.close()
    if stream:
        stream.close()
    print(f"[triforce] {summary_line(result)}", file=sys.stderr, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=1))
    if run.prompt_cache and engine.prefill_saved_anew:   # after the result: a failed write loses none of it
        from triforce.runtime.prompt_cache import save_prompt_cache
        save_prompt_cache(engine, Path(run.prompt_cache).expanduser())
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triforce", description="TriForce long-context speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text from a prompt")
    _add_generate_args(gen)
    gen.set_defaults(func=cmd_generate)
    from triforce.runtime.bench import add_bench_parser
    from triforce.runtime.distill.command import add_distill_parser
    add_distill_parser(sub)
    add_bench_parser(sub)
    from triforce.offload.plan import add_plan_parser
    add_plan_parser(sub)
    from triforce.runtime.batch import add_batch_parser
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
