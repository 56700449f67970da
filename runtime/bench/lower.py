"""`triforce bench --suite lower`: how close a lower level's distribution is to the target's, per
weight kind, measured directly instead of through a noisy end-to-end run.

Teacher forcing: the target continues the prompt (`--new-tokens` tokens, greedy at T = 0, sampled
at T > 0), then the target on its full cache and the middle level (a quantized copy of the target
on its retrieval cache of `--budget` tokens, by default the budget `triforce generate` picks)
each read prompt + continuation in one pass. At every continuation position:
    greedy agreement     the two argmaxes agree (at T = 0: the chance a greedy draft is accepted)
    expected acceptance  sum over the vocabulary of min(p, q) with p, q the two levels' sampling
                         distributions at T (top-p included): exactly the probability that the
                         acceptance rule keeps a token the middle level proposed at that position
    sure                 the share of positions where the middle level's top probability reaches the
                         bar from which `--gamma auto` drafts past γ2 (speculate.Extension), and the
                         expected acceptance there and elsewhere
    by position          the chance to keep a draft (greedy agreement, or expected acceptance at T > 0)
                         over the continuation's first 32 tokens, the next 96 and the rest: a retrieval
                         cache chosen once at the prompt's end misses most at the start (at 32K 0.62-0.75
                         over the first 16 tokens, against ~0.9 later; docs/BENCHMARKS.md round 48)
Rows are (context, T, weights); `--lower-weights` takes LAYERS or LAYERS:HEAD (e.g. int4:int8, an int8
head; plain int4 has an int4 head whose best candidates get exact logits, runtime/quant.py RescoredHead).
"""
from __future__ import annotations

import argparse
import dataclasses

import torch

from triforce.runtime.bench.registry import register
from triforce.runtime.bench.report import fmt, markdown_table
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine
from triforce.runtime.errors import UserError
from triforce.runtime.gamma import sure_bar
from triforce.runtime.modes import make_cache, mode_levels
from triforce.runtime.quant import lower_level_copy, weight_bytes
from triforce.runtime.sampling import SamplingParams, probs_from_logits
from triforce.runtime.speculate import Level, top_probabilities


POSITION_STRETCHES = ((0, 32), (32, 128), (128, None))   # continuation positions, for by_position


def by_position(accept: torch.Tensor) -> dict:
    """Each stretch of the continuation that has positions -> the mean of accept [n] there ("0-31", "32-127", "128-")."""
    n = accept.shape[0]
    return {f"{lo}-{'' if hi is None else hi - 1}": round(accept[lo:hi].mean().item(), 4)
            for lo, hi in POSITION_STRETCHES if lo < n}


def weights_spec(spec: str) -> tuple[str, str | None]:
    """LAYERS or LAYERS:HEAD -> (layers, head or None)."""
    layers, _, head = spec.partition(":")
    return layers, head or None


def teacher_forced(engine: Engine, request, ids: list[int]) -> tuple[Level, list[int], torch.Tensor]:
    """The target's own continuation of ids (request's temperature and max_new_tokens): returns the
    target level on its full cache of the prompt, prompt + continuation, and the target's logits at
    each continuation position [n, V]."""
    continuation = engine.generate(ids, request).token_ids             # the target's own tokens
    if len(continuation) < 2:
        raise UserError(f"the target stopped after {len(continuation)} tokens; use another prompt")
    seq, n = ids + continuation, len(continuation)
    stack, _ = engine.build_stack(request, len(seq) + 8)
    engine.prefill(stack, ids, None)
    target = stack[-1]
    prompt_query = target.cache.last_query.clone()    # what the retrieval selection scores with
    target_logits = target.feed(seq[:-1], keep_last=n)                      # [n, V]
    target.feed(ids[:-1])                                                   # back to the prompt
    target.cache.last_query.copy_(prompt_query)
    return target, seq, target_logits


def middle_logits(engine: Engine, request, model, target: Level, ids: list[int],
                  seq: list[int]) -> tuple[torch.Tensor, int]:
    """request's middle level on `model`, selected from teacher_forced's target over the prompt,
    reading seq in one pass: its logits at each continuation position [n, V], and the budget of
    the retrieval cache it read (set, or the one RunConfig.budget_for picked)."""
    middle = middle_level(engine, request, model, target, len(ids) - 1, len(seq) + 8)
    return middle.feed(seq[:-1], keep_last=len(seq) - len(ids)), middle.cache.budget


def middle_level(engine: Engine, run, model, target: Level, context: int, capacity: int) -> Level:
    """run's retrieval level on `model`, selected from the target's full cache over `context` tokens."""
    spec = mode_levels(dataclasses.replace(run, mode="retrieval"), capacity)[0][0]
    cache = make_cache(spec.cache, model.cfg, target.cache.rope, engine.device, engine.model.dtype)
    cache.fill_from(target.cache, context)
    level = Level(spec.name, model, cache, run.sampling, spec.max_pass)
    level.cached = list(target.cached[:context])
    level.commit(level.cached)
    return level


@torch.inference_mode()
def suite_lower(args: argparse.Namespace) -> dict:
    run = base_run(args, mode="ar", temperature=0.0)
    engine = Engine(run, keep_prefill=True)
    models = {}
    for spec in args.lower_weights:   # validates the kinds before anything runs
        layers, head = weights_spec(spec)
        models[spec] = lower_level_copy(engine.model, layers, head=head)
    rows = []
    for context in (int(c) for c in args.contexts if c != "max"):
        ids = prompt_ids(engine, args, context)
        for temperature in args.temperatures:
            params = SamplingParams(temperature=temperature, top_p=args.top_p)
            request = dataclasses.replace(run, temperature=temperature, max_new_tokens=args.new_tokens)
            target, seq, target_logits = teacher_forced(engine, request, ids)
            n = len(seq) - len(ids)
            p = probs_from_logits(target_logits, params)
            for spec in args.lower_weights:
                logits, budget = middle_logits(engine, request, models[spec], target, ids, seq)   # [n, V]
                q = probs_from_logits(logits, params)
                agrees = (logits.argmax(-1) == target_logits.argmax(-1)).float()       # [n]
                overlap = torch.minimum(p, q).sum(-1)                                    # [n]
                accept = agrees if params.greedy else overlap     # each position's chance to keep the draft
                sure = top_probabilities(logits, q, params.greedy) >= sure_bar(params.greedy)
                rows.append(dict(context=context, temperature=temperature, weights=spec,
                                 budget=budget, tokens=n, weight_bytes=weight_bytes(models[spec]),
                                 greedy_agreement=round(agrees.mean().item(), 4),
                                 expected_acceptance=round(overlap.mean().item(), 4),
                                 sure_share=round(sure.float().mean().item(), 4),
                                 sure_acceptance=round(accept[sure].mean().item(), 4) if sure.any() else None,
                                 unsure_acceptance=round(accept[~sure].mean().item(), 4) if (~sure).any() else None,
                                 acceptance_by_position=by_position(accept)))
                print(table_lower(dict(rows=[rows[-1]])).splitlines()[-1], flush=True)
    return dict(suite="lower", budget=run.retrieval_budget, top_p=args.top_p, rows=rows)


def table_lower(report: dict) -> str:
    body = [[str(r["context"]), str(r["temperature"]), r["weights"], str(r["budget"]), str(r["tokens"]),
             fmt(r["weight_bytes"] / 1e6, ".0f"), fmt(r["greedy_agreement"], ".3f"), fmt(r["expected_acceptance"], ".3f"),
             fmt(r.get("sure_share"), ".2f"), fmt(r.get("sure_acceptance"), ".3f"), fmt(r.get("unsure_acceptance"), ".3f"),
             " / ".join(f"{v:.3f}" for v in r.get("acceptance_by_position", {}).values()) or "-"]
            for r in report["rows"]]
    return markdown_table(["context", "T", "middle weights", "budget", "tokens", "weight MB", "greedy agreement",
                           "expected acceptance", "sure share", "acceptance where sure", "where not",
                           "acceptance by position (0-31 / 32-127 / 128-)"], body)


register("lower", table=table_lower,
         help="a quantized middle level against the target, teacher-forced: agreement, expected acceptance")(suite_lower)
