"""The settings of one distillation run (flags and JSON keys: `triforce distill`, distill.json)."""
from __future__ import annotations

from dataclasses import dataclass

from triforce.runtime.errors import UserError
from triforce.runtime.model import TORCH_DTYPES

DEFAULT_LAYERS = 4

@dataclass(frozen=True)
class DistillConfig:
    out: str                          # checkpoint directory written (and read by resume)
    target: str | None = None         # target checkpoint directory; None = the embedded SmolLM2-135M
    corpus: str | None = None         # UTF-8 text file; None = the embedded King James Bible
    layers: int | None = None         # drafter depth: the target's first N layers (None: 4, or the checkpoint's)
    steps: int | None = None          # budget in optimizer steps (whole run, across resumes)
    minutes: float | None = None      # budget in wall-clock minutes (whole run); whichever ends first
    batch: int = 1                    # windows per step (few tokens per step: more steps per CPU-minute)
    seq_len: int = 256                # tokens per window (the drafter's streaming cache holds 256)
    lr: float = 1e-3                  # peak AdamW learning rate
    warmup: int = 20                  # linear warm-up steps
    min_lr_ratio: float = 0.1         # cosine floor, as a fraction of lr
    grad_clip: float = 1.0            # max global gradient norm
    eval_every: int = 50              # steps between held-out agreement measurements
    eval_windows: int = 16            # held-out windows of seq_len tokens
    held_out_fraction: float = 0.02   # tail of the corpus kept out of training
    save_every_minutes: float = 5.0   # periodic checkpoint interval (and one at the end)
    threads: int | None = None        # torch.set_num_threads; None = torch's default
    dtype: str = "fp32"               # teacher weights' dtype (the student always trains in fp32)
    device: str = "auto"              # auto | cpu | cuda | cuda:N
    seed: int = 0                     # window sampling seed
    resume: bool = False              # continue the run saved in `out`
    init: str | None = None           # a new run starts from this drafter checkpoint's layers (None: the target's)

    def validate(self) -> "DistillConfig":
        for name in ("batch", "seq_len", "warmup", "eval_every", "eval_windows"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} {getattr(self, name)} must be at least 1")
        if self.layers is not None and self.layers < 1:
            raise UserError(f"--layers {self.layers} must be at least 1")
        if self.steps is None and self.minutes is None:
            raise UserError("no training budget: pass --steps N and/or --minutes M")
        if (self.steps is not None and self.steps < 0) or (self.minutes is not None and self.minutes <= 0):
            raise UserError(f"budget --steps {self.steps} must be >= 0 and --minutes {self.minutes} > 0")
        if not self.lr > 0 or self.save_every_minutes <= 0:
            raise UserError(f"--lr {self.lr} and --save-every-minutes {self.save_every_minutes} must be > 0")
        if not 0 < self.held_out_fraction < 1:
            raise UserError(f"held_out_fraction {self.held_out_fraction} must be between 0 and 1")
        if self.init is not None and self.resume:
            raise UserError(f"--init {self.init!r} starts a new run and --resume continues one; pass only one")
        if self.dtype not in TORCH_DTYPES:
            raise UserError(f"--dtype {self.dtype!r} is not one of {', '.join(TORCH_DTYPES)}")
        return self

    def spent(self, step: int, elapsed_s: float) -> float:
        """Fraction of the budget used: the larger of the step and time fractions."""
        fractions = [0.0]
        if self.steps is not None:
            fractions.append(step / self.steps if self.steps else 1.0)
        if self.minutes is not None:
            fractions.append(elapsed_s / (self.minutes * 60))
        return max(fractions)
