"""`triforce bench`: side-by-side measurements in one process. Decode and prefill are timed
separately; every configuration is warmed up first and repeated, and medians are reported.

Suite `peers`: our autoregressive decoding against transformers' `generate` (same model, dtype,
prompt, greedy), plus the memory-traffic floor: bytes a decode step must read (weights + KV)
over the read bandwidth measured here.
"""
from __future__ import annotations

import dataclasses
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from runtime.config import RunConfig
from runtime.engine import Engine
from runtime.model import TORCH_DTYPES


def read_bandwidth_gbs(megabytes: int = 1024, repeats: int = 5) -> float:
    """GB/s of a streaming read (a sum over a tensor far larger than the caches)."""
    x = torch.ones(megabytes * 2**20 // 4, dtype=torch.float32)
    x.sum()  # warm-up: fault the pages in
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        x.sum()
        times.append(time.perf_counter() - start)
    return x.numel() * 4 / min(times) / 1e9


def decode_bytes_per_token(model, context: int) -> int:
    """Bytes one decode step reads: every weight matrix once (the embedding row is negligible;
    with tied embeddings the lm_head reads the matrix once) + the KV cache at this context."""
    seen, weights = set(), 0
    for name, p in model.named_parameters():
        if p.data_ptr() in seen or name.endswith("embed_tokens.weight") and not model.cfg.tie_word_embeddings:
            continue
        seen.add(p.data_ptr())
        weights += p.numel() * p.element_size()
    kv = model.cfg.kv_bytes_per_token(model.dtype.itemsize) * context
    return weights + kv


def ours_decode_ms(engine: Engine, ids: list[int], new_tokens: int) -> tuple[float, float]:
    """(prefill seconds, decode ms/token) of our AR path, greedy, never stopping early."""
    run = RunConfig(max_new_tokens=new_tokens)
    eos = engine.cfg.eos_token_ids
    engine.cfg = dataclasses.replace(engine.cfg, eos_token_ids=())
    try:
        result = engine.generate(ids, run)
    finally:
        engine.cfg = dataclasses.replace(engine.cfg, eos_token_ids=eos)
    return result.stats["prefill_s"], result.stats["ms_per_token"]


def hf_decode_ms(hf, ids: list[int], new_tokens: int) -> tuple[float, float]:
    """(prefill seconds, decode ms/token) of transformers' generate: generate(1) is the prefill,
    the rest of generate(1 + N) is N decode steps."""
    x = torch.tensor([ids])
    start = time.perf_counter()
    hf.generate(x, max_new_tokens=1, min_new_tokens=1, do_sample=False)
    prefill_s = time.perf_counter() - start
    start = time.perf_counter()
    hf.generate(x, max_new_tokens=1 + new_tokens, min_new_tokens=1 + new_tokens, do_sample=False)
    return prefill_s, 1000 * (time.perf_counter() - start - prefill_s) / new_tokens


def suite_peers(args) -> dict:
    from transformers import AutoModelForCausalLM
    from runtime.assets import kjv_text
    rows = []
    bandwidth = read_bandwidth_gbs()
    for dtype in args.dtypes:
        engine = Engine(RunConfig(model=args.model, dtype=dtype))
        ids = engine.tokenizer.encode(kjv_text()[:args.context * 6])[:args.context]
        hf = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), dtype=TORCH_DTYPES[dtype]).eval()
        ours, theirs = [], []
        for rep in range(args.repeats + 1):  # the first round is a warm-up and is dropped
            with torch.inference_mode():
                o, t = ours_decode_ms(engine, ids, args.new_tokens), hf_decode_ms(hf, ids, args.new_tokens)
            if rep:
                ours.append(o)
                theirs.append(t)
        floor_ms = 1000 * decode_bytes_per_token(engine.model, len(ids)) / (bandwidth * 1e9)
        row = dict(dtype=dtype, context=len(ids), new_tokens=args.new_tokens,
                   ours_ms=statistics.median(o[1] for o in ours), hf_ms=statistics.median(t[1] for t in theirs),
                   ours_prefill_s=statistics.median(o[0] for o in ours),
                   hf_prefill_s=statistics.median(t[0] for t in theirs),
                   ours_ms_all=[round(o[1], 2) for o in ours], hf_ms_all=[round(t[1], 2) for t in theirs],
                   floor_ms=floor_ms, bytes_per_token=decode_bytes_per_token(engine.model, len(ids)))
        row["speedup_vs_hf"] = row["hf_ms"] / row["ours_ms"]
        row["ours_over_floor"] = row["ours_ms"] / floor_ms
        rows.append(row)
        del hf, engine
    return dict(suite="peers", read_bandwidth_gbs=bandwidth, rows=rows)


def suite_modes(args) -> dict:
    """Every mode on the same KJV prompt, greedy and sampled: decode ms/token, speedup over `ar`,
    acceptance per level, tokens per full-target pass. Prefill is reported separately."""
    from runtime.assets import kjv_text
    rows = []
    base = dict(model=args.model, draft_model=args.draft_model, dtype=args.dtypes[0], rope_scaling=args.rope_scaling,
                max_new_tokens=args.new_tokens, retrieval_budget=args.budget, gamma1=args.gamma1,
                gamma2=args.gamma2, top_p=0.9)
    engine = Engine(RunConfig(mode="triforce", **base), keep_prefill=True)  # one prefill serves every mode
    text = kjv_text()
    for context in args.contexts:
        ids = engine.tokenizer.encode(text[:context * 6])[:context]
        for temperature in args.temperatures:
            ar_ms = None
            for mode in args.modes:
                run = RunConfig(mode=mode, temperature=temperature, **base)
                result = engine.generate(ids, run)
                s = result.stats
                ar_ms = s["ms_per_token"] if mode == "ar" else ar_ms
                row = dict(context=context, temperature=temperature, mode=mode, ms_per_token=s["ms_per_token"],
                           prefill_s=s["prefill_s"], new_tokens=s["new_tokens"],
                           tokens_per_target_pass=s["tokens_per_target_pass"],
                           acceptance={n: lv.get("acceptance") for n, lv in s["levels"].items() if lv["drafted"]},
                           seconds_per_level={n: lv["seconds"] for n, lv in s["levels"].items()})
                row["speedup_vs_ar"] = ar_ms / s["ms_per_token"] if ar_ms else None
                rows.append(row)
                print(_mode_row(row), flush=True)
            if args.assisted and not args.rope_scaling:
                row = assisted_row(engine, ids, temperature, args.new_tokens, ar_ms)
                rows.append(row)
                print(_mode_row(row), flush=True)
    return dict(suite="modes", budget=args.budget, gamma1=args.gamma1, gamma2=args.gamma2,
                draft_model=str(engine.draft_dir), rows=rows)


def assisted_row(engine: Engine, ids: list[int], temperature: float, new_tokens: int, ar_ms: float) -> dict:
    """transformers' assisted generation with the same drafter, same prompt and sampling."""
    from transformers import AutoModelForCausalLM
    dtype = engine.model.dtype
    target = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), dtype=dtype).eval()
    drafter = AutoModelForCausalLM.from_pretrained(str(engine.draft_dir), dtype=dtype).eval()
    x = torch.tensor([ids])
    sampling = dict(do_sample=True, temperature=temperature, top_p=0.9) if temperature else dict(do_sample=False)
    with torch.inference_mode():
        start = time.perf_counter()
        target.generate(x, assistant_model=drafter, max_new_tokens=1, min_new_tokens=1, **sampling)
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        target.generate(x, assistant_model=drafter, max_new_tokens=1 + new_tokens, min_new_tokens=1 + new_tokens,
                        **sampling)
    ms = 1000 * (time.perf_counter() - start - prefill_s) / new_tokens
    return dict(context=len(ids), temperature=temperature, mode="transformers-assisted", ms_per_token=ms,
                prefill_s=prefill_s, new_tokens=new_tokens, tokens_per_target_pass=None, acceptance={},
                seconds_per_level={}, speedup_vs_ar=ar_ms / ms if ar_ms else None)


def _mode_row(r: dict) -> str:
    acc = ", ".join(f"{k} {v:.2f}" for k, v in r["acceptance"].items())
    speed = f"{r['speedup_vs_ar']:.2f}x" if r["speedup_vs_ar"] else "-"
    return (f"| {r['context']} | {r['temperature']} | {r['mode']} | {r['ms_per_token']:.1f} | {speed} "
            f"| {r['tokens_per_target_pass']} | {acc or '-'} | {r['prefill_s']:.1f} |")


def print_modes(report: dict) -> None:
    print(f"budget {report['budget']}, gamma1 {report['gamma1']}, gamma2 {report['gamma2']}, "
          f"drafter {report['draft_model']}")
    print("| context | T | mode | ms/token | speedup vs ar | tokens per target pass | acceptance | prefill s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in report["rows"]:
        print(_mode_row(r))


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    import os
    return dict(cpu=cpu_name(), cpus=os.cpu_count(), torch_threads=torch.get_num_threads(),
                torch=torch.__version__, python=platform.python_version(),
                cuda=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)


def print_peers(report: dict) -> None:
    print(f"read bandwidth {report['read_bandwidth_gbs']:.1f} GB/s")
    print("| dtype | context | ours ms/token | transformers ms/token | speedup | floor ms/token | ours / floor "
          "| prefill s (ours / transformers) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in report["rows"]:
        print(f"| {r['dtype']} | {r['context']} | {r['ours_ms']:.1f} | {r['hf_ms']:.1f} | {r['speedup_vs_hf']:.2f}x "
              f"| {r['floor_ms']:.1f} | {r['ours_over_floor']:.2f}x "
              f"| {r['ours_prefill_s']:.1f} / {r['hf_prefill_s']:.1f} |")


def _offload_suite():
    from offload.bench import print_offload, suite_offload
    return suite_offload, print_offload


SUITES = {"peers": (suite_peers, print_peers), "modes": (suite_modes, print_modes), "offload": _offload_suite()}


def add_bench_parser(sub) -> None:
    p = sub.add_parser("bench", help="side-by-side benchmarks (see docs/BENCHMARKS.md)")
    p.add_argument("--suite", choices=sorted(SUITES), default="peers")
    p.add_argument("--out", help="directory for the JSON report")
    p.add_argument("--model", help="checkpoint directory (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--context", type=int, default=4096, help="prompt tokens of KJV text")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--draft-model", help="drafter for the modes suite (default: the embedded drafter)")
    p.add_argument("--contexts", type=int, nargs="+", default=[4096], help="modes suite: prompt lengths")
    p.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 0.6], help="modes suite")
    p.add_argument("--modes", nargs="+", default=["ar", "spec", "retrieval", "streaming", "triforce"])
    p.add_argument("--budget", type=int, default=1024, help="modes suite: retrieval budget")
    p.add_argument("--assisted", action="store_true", help="modes suite: also time transformers' assisted "
                   "generation with the same drafter (contexts within the model's own positions)")
    p.add_argument("--rope-scaling", help="modes suite: TYPE:FACTOR for contexts beyond the model's positions")
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--gamma2", type=int, default=6)
    p.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    run, show = SUITES[args.suite]
    report = run(args)
    report["machine"] = machine()
    report["command"] = "triforce " + " ".join(sys.argv[1:])
    show(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{args.suite}.json").write_text(json.dumps(report, indent=1))
    return 0
