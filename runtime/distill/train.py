"""The training loop: sample windows, one KL step, measure held-out agreement every eval_every
steps, checkpoint every save_every_minutes, on interrupt and at the end. `distill()` runs it all."""
from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

import torch

from triforce.runtime.distill.checkpoint import Run, check_out_dir, prepare, run_lock, save_checkpoint
from triforce.runtime.distill.config import DistillConfig
from triforce.runtime.distill.corpus import sample_windows
from triforce.runtime.distill.student import agreement, distill_loss, held_out_metrics, teacher_logits, trainable, window_logits
from triforce.runtime.io_utils import ProgressLine, clock, recover_dir
from triforce.runtime.model import Transformer


def train_step(student: Transformer, teacher: Transformer, optimizer: torch.optim.Optimizer,
               tokens: torch.Tensor, lr: float, grad_clip: float) -> float:
    """One optimizer step on windows [B, T]; returns the loss (nats/token)."""
    target = teacher_logits(teacher, tokens)
    loss = distill_loss(window_logits(student, tokens), target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(trainable(student), grad_clip)
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    return loss.item()  # host sync, once per step (the progress line needs it)


def learning_rate(cfg: DistillConfig, step: int, spent: float) -> float:
    """Linear warm-up over cfg.warmup steps, then cosine from lr to lr*min_lr_ratio as the
    budget fraction `spent` goes 0 -> 1."""
    warm = min(1.0, (step + 1) / cfg.warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * min(spent, 1.0)))
    return cfg.lr * warm * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * cosine)



def status_text(run: Run, losses: deque, step_times: deque, tokens_per_step: int) -> str:
    cfg, st = run.cfg, run.state
    tok_s = tokens_per_step * len(step_times) / max(sum(step_times), 1e-9)
    remaining = [cfg.minutes * 60 - st.elapsed_s] if cfg.minutes is not None else []
    if cfg.steps is not None and st.step:
        remaining.append((cfg.steps - st.step) * st.elapsed_s / st.step)
    last = st.history[-1] if st.history else None
    agree = f"{last['agreement']:.1%} @ step {last['step']}" if last else "-"
    loss = f"{sum(losses) / len(losses):.3f}" if losses else "-"
    of = f"/{cfg.steps}" if cfg.steps is not None else ""
    return (f"[distill] step {st.step}{of} | {tok_s:.0f} tok/s | loss {loss} | held-out agreement {agree} | "
            f"{clock(st.elapsed_s)} elapsed | ETA {clock(min(remaining)) if remaining else '?'}")


def measure(run: Run, loss: float | None) -> None:
    """Held-out agreement, appended to the run's history."""
    st = run.state
    value = agreement(run.student, run.corpus.held_out, run.target_top1)
    st.history.append({"step": st.step, "tokens": st.tokens_seen, "elapsed_s": round(st.elapsed_s, 1),
                       "loss": None if loss is None else round(loss, 4), "agreement": round(value, 4)})


def train(run: Run, progress: ProgressLine, log: Callable[[str], None]) -> None:
    """The loop: sample windows, one KL step, measure every eval_every steps, checkpoint every
    save_every_minutes; a checkpoint is also written on interrupt and at the end."""
    cfg, st, out = run.cfg, run.state, Path(run.cfg.out).expanduser()
    losses, step_times = deque(maxlen=20), deque(maxlen=20)  # recent steps, for the status line
    clock_zero = time.monotonic() - st.elapsed_s             # elapsed continues across resumes
    last_save = time.monotonic()
    if not st.history or st.history[-1]["step"] != st.step:
        measure(run, None)                                   # the starting point (after resume: where it stands)
        progress.show(status_text(run, losses, step_times, cfg.batch * cfg.seq_len), force=True)
    try:
        while not run.done():
            tokens = sample_windows(run.corpus.train, cfg.batch, cfg.seq_len, run.gen).to(run.student.device)
            lr = learning_rate(cfg, st.step, cfg.spent(st.step, st.elapsed_s))
            started = time.perf_counter()
            losses.append(train_step(run.student, run.teacher, run.optimizer, tokens, lr, cfg.grad_clip))
            step_times.append(time.perf_counter() - started)
            st.step, st.tokens_seen = st.step + 1, st.tokens_seen + tokens.numel()
            st.elapsed_s = time.monotonic() - clock_zero
            evaluated = st.step % cfg.eval_every == 0
            if evaluated:
                measure(run, sum(losses) / len(losses))
            progress.show(status_text(run, losses, step_times, tokens.numel()), force=evaluated)
            if time.monotonic() - last_save >= cfg.save_every_minutes * 60:
                save_checkpoint(out, run)
                last_save = time.monotonic()
    except KeyboardInterrupt:
        progress.close()
        log(f"interrupted at step {st.step}: saving a checkpoint to {out} (continue with --resume)")
        save_checkpoint(out, run)
        raise
    progress.close()
    if st.history[-1]["step"] != st.step:
        measure(run, sum(losses) / len(losses) if losses else None)


def distill(cfg: DistillConfig, tokens: torch.Tensor | None = None, command: str = "",
            log: Callable[[str], None] | None = None, progress: ProgressLine | None = None) -> dict:
    """Trains (or continues) a drafter and writes its checkpoint to cfg.out; returns distill.json's
    content. `tokens` [N] replaces the corpus (tests: no tokenizer needed)."""
    cfg = cfg.validate()
    log = log or (lambda text: print(f"[distill] {text}", file=sys.stderr, flush=True))
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # Most of a 49K-way softmax underflows to denormals, which x86 multiplies ~100x slower: without
    # this the KL's elementwise ops cost as much as the student's matmuls. Process-wide, harmless.
    torch.set_flush_denormal(True)
    out = Path(cfg.out).expanduser()
    if out.exists() and not out.is_dir():
        check_out_dir(out, cfg.resume)
    with run_lock(out):
        recover_dir(out)
        run = prepare(cfg, tokens, log)
        run.command = command
        train(run, progress or ProgressLine(), log)
        started = time.monotonic()
        run.state.final = held_out_metrics(run.student, run.teacher, run.corpus.held_out)
        run.state.elapsed_s += time.monotonic() - started
        save_checkpoint(out, run)
    final = run.state.final
    log(f"done: step {run.state.step}, {run.state.tokens_seen:,} tokens, {clock(run.state.elapsed_s)}; held-out "
        f"agreement {final['agreement']:.1%}, accept rate (T=1) {final['accept_rate']:.1%}, "
        f"KL {final['kl']:.3f}; checkpoint: {out}")
    return run.report()

