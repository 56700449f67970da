"""Measuring one configuration: warm-up, repeats, medians and spread; the machine it ran on.

Benchmarks never stop on EOS, so every run of every configuration decodes the same number of
tokens; `generate_unstopped` is the one place that does this.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import statistics
import time
from collections import Counter
from pathlib import Path

import torch

from triforce.runtime.config import RunConfig
from triforce.runtime.decode import timed as decode_timed
from triforce.runtime.engine import Engine, Result
from triforce.runtime.probes import nvml_gpus
from triforce.runtime.quant import weight_bytes


@contextlib.contextmanager
def no_eos(engine: Engine):
    """The engine ignores EOS inside this block (restored after, also on errors)."""
    eos = engine.cfg.eos_token_ids
    engine.cfg = dataclasses.replace(engine.cfg, eos_token_ids=())
    try:
        yield engine
    finally:
        engine.cfg = dataclasses.replace(engine.cfg, eos_token_ids=eos)


def generate_unstopped(engine: Engine, ids: list[int], run: RunConfig) -> Result:
    """engine.generate that decodes exactly run.max_new_tokens tokens, as a first request: under
    --gamma auto it probes the pass costs as the first `triforce generate` of its shape on a machine
    does (neither the costs an earlier request left on the engine nor those stored on disk are
    used, and none are stored), so `request_s` counts the probe; later processes skip it."""
    engine.pass_costs.clear()
    engine.stored_costs = False
    with no_eos(engine), torch.inference_mode():
        return engine.generate(ids, run)


def interleaved(variants: dict, repeats: int, warmup: int = 1) -> dict[str, list]:
    """The suites' repeat loop: `warmup` rounds (dropped), then `repeats` rounds, each running every
    variant (name -> a call with no arguments) once, in order, so that drift and load from
    elsewhere hit all variants alike. Returns each variant's results of the counted rounds."""
    results = {name: [] for name in variants}
    for round_ in range(warmup + repeats):
        for name, run in variants.items():
            value = run()
            if round_ >= warmup:
                results[name].append(value)
    return results


def timed(run, device: torch.device | None = None):
    """`run` (no arguments) made to return its wall seconds instead of its result, for interleaved;
    on a GPU `device` is drained after each call (decode.timed), so its kernels count."""
    def timed_run() -> float:
        return decode_timed(run, device=device)[1]
    return timed_run


def spread(values: list[float], digits: int = 3) -> dict:
    """Median, min, max and every sample (rounded) of repeated measurements."""
    return dict(median=round(statistics.median(values), digits), min=round(min(values), digits),
                max=round(max(values), digits), all=[round(v, digits) for v in values])


def measure_ours(engine: Engine, ids: list[int], run: RunConfig, repeats: int) -> dict:
    """One configuration of our engine: a warm-up run (dropped), then `repeats` runs with seeds
    run.seed, run.seed + 1, ... (at T > 0 each repeat draws its own sample; at T = 0 all agree).
    Times are medians with spread; acceptance and tokens per target pass are pooled over the
    repeats (accepted / drafted summed)."""
    return measure_side_by_side(engine, ids, [run], repeats)[0]


def measure_side_by_side(engine: Engine, ids: list[int], runs: list[RunConfig], repeats: int) -> list[dict]:
    """measure_ours for several configurations whose ratios matter (the modes against `ar`): every
    warm-up first, then the repeats round-robin (repeat i of each configuration, then repeat
    i + 1), so that a machine that drifts while they run (a shared host) moves all alike."""
    warm = [generate_unstopped(engine, ids, run) for run in runs]   # dropped, but for their prefill time
    results = [[] for _ in runs]
    for i in range(repeats):
        for run, out in zip(runs, results):
            out.append(generate_unstopped(engine, ids, dataclasses.replace(run, seed=run.seed + i)))
    return [summarize(run, ids, [r.stats for r in out], w.stats["prefill_s"]) for run, out, w in zip(runs, results, warm)]


def summarize(run: RunConfig, ids: list[int], stats: list[dict], warmup_prefill_s: float) -> dict:
    """One configuration's row from its repeats' stats."""
    levels = {}
    for name in stats[0]["levels"]:
        drafted = sum(s["levels"][name]["drafted"] for s in stats)
        accepted = sum(s["levels"][name]["accepted"] for s in stats)
        levels[name] = dict(drafted=drafted, accepted=accepted,
                            acceptance=round(accepted / drafted, 4) if drafted else None,
                            seconds=round(statistics.median(s["levels"][name]["seconds"] for s in stats), 4),
                            rebuilds=sum(s["levels"][name]["rebuilds"] for s in stats),
                            copied=sum(s["levels"][name].get("copied", 0) for s in stats),
                            copied_accepted=sum(s["levels"][name].get("copied_accepted", 0) for s in stats),
                            # drafts past γ while the proposer was sure (speculate.Extension), and the tested
                            # drafts it was sure of
                            **{k: sum(s["levels"][name].get(k, 0) for s in stats)
                               for k in ("extended", "extended_accepted", "sure", "sure_accepted")})
    tokens = sum(s["new_tokens"] for s in stats)
    passes = sum(s["target_passes"] for s in stats)
    row = dict(mode=run.mode, temperature=run.temperature, context=len(ids), new_tokens=stats[0]["new_tokens"],
               repeats=len(stats), ms_per_token=spread([s["ms_per_token"] for s in stats]),
               prefill_s=spread([s["prefill_s"] for s in stats]), warmup_prefill_s=warmup_prefill_s,
               # what a request spends past the target's (shared) prefill: its own prefill, the --gamma auto
               # probe and the decode (ms_per_token leaves the first two out)
               request_s=spread([s["prefill_s"] + s.get("gamma", {}).get("probe_s", 0.0) + s["decode_s"] for s in stats]),
               tokens_per_target_pass=round(tokens / passes, 3) if passes else None,
               acceptance={n: lv["acceptance"] for n, lv in levels.items() if lv["acceptance"] is not None},
               copied={n: [lv["copied_accepted"], lv["copied"]] for n, lv in levels.items() if lv["copied"]},
               levels=levels)
    budgets = [lv["budget"] for lv in stats[0]["levels"].values() if "budget" in lv]
    if budgets:   # the retrieval level's (set, or the one RunConfig.budget_for picked for this context)
        row["budget"] = budgets[0]
    if "gamma" in stats[0]:   # --gamma auto: what it chose, over the repeats, and what its probes cost
        rounds = Counter()
        for s in stats:
            rounds.update(s["gamma"]["rounds_per_choice"])
        row["gamma"] = dict(rounds_per_choice=dict(rounds.most_common()),
                            probe_s=spread([s["gamma"]["probe_s"] for s in stats], 4),
                            pass_ms=stats[0]["gamma"]["pass_ms"])
        ceilings = [(s["gamma"]["target_alone_ms_per_token"], s["gamma"]["ceiling"]) for s in stats if "ceiling" in s["gamma"]]
        if ceilings:   # the most a stack on these target passes could reach over `ar` (gamma.free_draft_seconds)
            row["gamma"]["ceiling_vs_ar"] = {
                kind: round(statistics.median(alone / c[f"{kind}_ms_per_token"] for alone, c in ceilings), 3)
                for kind in ("free_drafts", "right_drafts")}
    return row


def hf_sampling(temperature: float, top_p: float) -> dict:
    """transformers' generate() arguments for the same sampling as our RunConfig."""
    if temperature == 0:
        return dict(do_sample=False)
    return dict(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)


def measure_hf(model, ids: list[int], new_tokens: int, repeats: int, sampling: dict, **generate_kw) -> dict:
    """transformers' generate (plain, or assisted when generate_kw holds assistant_model):
    a warm-up generate(1 + N), the prefill timed as generate(1), then `repeats` runs of
    generate(1 + N) whose decode time is the total less the prefill, over N tokens."""
    x = torch.tensor([ids])

    def gen(n: int) -> float:
        torch.manual_seed(len(ids) + n)
        start = time.perf_counter()
        with torch.inference_mode():
            model.generate(x, max_new_tokens=n, min_new_tokens=n, **sampling, **generate_kw)
        return time.perf_counter() - start

    gen(1 + new_tokens)  # warm-up
    prefill_s = gen(1)
    ms = [1000 * max(gen(1 + new_tokens) - prefill_s, 0.0) / new_tokens for _ in range(repeats)]
    return dict(context=len(ids), new_tokens=new_tokens, repeats=repeats, ms_per_token=spread(ms),
                prefill_s=spread([prefill_s]), warmup_prefill_s=prefill_s, tokens_per_target_pass=None,
                acceptance={}, levels={})


def weight_bytes_and_params(model) -> tuple[int, int]:
    """Bytes of the weights a pass reads once (weight_bytes: dense, int8 or int4, a tied head
    once) and the parameters of its matrix products (in x out of every linear layer, dense or
    quantized, the head included; the embedding is a row lookup)."""
    params = sum(m.in_features * m.out_features for m in model.modules()
                 if hasattr(m, "in_features") and hasattr(m, "out_features"))
    return weight_bytes(model), params


def pass_cost(model, kv_tokens: int, T: int) -> tuple[int, int]:
    """(bytes, FLOPs) of a T-token pass of `model` attending to `kv_tokens` cached positions."""
    cfg = model.cfg
    weights, params = weight_bytes_and_params(model)
    kv = cfg.kv_bytes_per_token(model.dtype.itemsize) * kv_tokens
    attention = 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * kv_tokens * T
    return weights + kv, 2 * params * T + attention


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[dict]:
    """GPUs as NVML sees them (name, memory, driver); [] without NVML or a GPU (not an error)."""
    return [dict(index=g["index"], name=g["name"], memory_gib=round(g["memory"] / 2**30, 1), driver=g["driver"])
            for g in nvml_gpus()]


def machine() -> dict:
    """What the figures were measured on."""
    import psutil
    import transformers
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return dict(cpu=cpu_name(), cpus=os.cpu_count(), cpus_usable=affinity,
                memory_gib=round(psutil.virtual_memory().total / 2**30, 1), torch_threads=torch.get_num_threads(),
                gpus=gpus(), cuda=torch.version.cuda if torch.cuda.is_available() else None,
                torch=torch.__version__, transformers=transformers.__version__,
                python=platform.python_version(), platform=platform.platform())
