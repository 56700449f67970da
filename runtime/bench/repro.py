"""`triforce bench --suite repro --setting a100|2x4090|1x4090 --target DIR --draft DIR`: the paper's
GPU experiments, one command each, with the paper's figures printed beside ours.

Settings live in configs/repro/NAME.yaml: the paper's figures, the hardware, the bench sizes and
the RunConfig keys (`run`, offload placement included).
"""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import yaml

from triforce.runtime.bench.measure import measure_ours
from triforce.runtime.bench.registry import register
from triforce.runtime.bench.report import acceptance_cell, fmt, markdown_table, ms_cell
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.config import RunConfig
from triforce.runtime.errors import UserError

REPRO_DIR = Path(__file__).resolve().parents[2] / "configs" / "repro"


@dataclass(frozen=True)
class Setting:
    name: str             # a100 | 2x4090 | 1x4090 (the file's stem)
    description: str      # one line: hardware, model, context
    paper: dict           # the paper's figures: triforce_ms, baseline_ms, speedup, baseline (what it was)
    gpus: int             # CUDA devices needed
    min_gpu_memory_gib: float  # per device
    context: int          # prompt tokens
    new_tokens: int       # decode steps timed per run
    repeats: int          # runs after one warm-up
    modes: tuple          # modes measured; `ar` first (the baseline)
    run: dict             # RunConfig keys

    def run_config(self, target: str, draft: str) -> RunConfig:
        return RunConfig(model=target, draft_model=draft, max_new_tokens=self.new_tokens, **self.run).validate()


def settings() -> list[str]:
    return sorted(p.stem for p in REPRO_DIR.glob("*.yaml"))


def load_setting(name: str) -> Setting:
    path = REPRO_DIR / f"{name}.yaml"
    if not path.is_file():
        raise UserError(f"no reproduction setting {name!r} (looked for {path}); available: "
                        f"{', '.join(settings()) or 'none'}")
    raw = yaml.safe_load(path.read_text())
    bench, hardware = raw["bench"], raw["hardware"]
    return Setting(name=name, description=raw["description"], paper=raw["paper"], gpus=int(hardware["gpus"]),
                   min_gpu_memory_gib=float(hardware["min_gpu_memory_gib"]), context=int(bench["context"]),
                   new_tokens=int(bench["new_tokens"]), repeats=int(bench["repeats"]), modes=tuple(bench["modes"]),
                   run=dict(raw["run"]))


def check_checkpoint(flag: str, path: str | None, role: str) -> str:
    if not path:
        raise UserError(f"--suite repro needs {flag} DIR: the {role} checkpoint directory (config.json + "
                        "*.safetensors + tokenizer); nothing is downloaded")
    p = Path(path).expanduser()
    if not (p / "config.json").is_file():
        state = "does not exist" if not p.exists() else "has no config.json"
        raise UserError(f"{flag} {path!r} {state}; pass the local {role} checkpoint directory")
    return str(p.resolve())


def check_gpus(setting: Setting) -> None:
    import torch
    if not torch.cuda.is_available():
        raise UserError(f"setting {setting.name!r} ({setting.description}) needs CUDA, and this machine has no "
                        "usable CUDA device (torch.cuda.is_available() is False); run it on the GPU machine")
    count = torch.cuda.device_count()
    if count < setting.gpus:
        raise UserError(f"setting {setting.name!r} needs {setting.gpus} CUDA devices; this machine has {count}")
    for i in range(setting.gpus):
        gib = torch.cuda.get_device_properties(i).total_memory / 2**30
        if gib < setting.min_gpu_memory_gib:
            raise UserError(f"setting {setting.name!r} needs {setting.min_gpu_memory_gib} GiB per GPU; cuda:{i} has "
                            f"{gib:.0f} GiB")


def suite_repro(args: argparse.Namespace) -> dict:
    if not args.setting:
        raise UserError(f"--suite repro needs --setting NAME; available: {', '.join(settings())}")
    setting = load_setting(args.setting)
    target = check_checkpoint("--target", args.target, "target (e.g. Llama2-7B-128K)")
    draft = check_checkpoint("--draft", args.draft, "drafter (e.g. llama-68m)")
    run = setting.run_config(target, draft)
    check_gpus(setting)
    from triforce.runtime.backends import open_engine
    engine = open_engine(dataclasses.replace(run, mode="triforce"), keep_prefill=True,   # backend: ray for tp > 1
                         context=run.capacity_for(setting.context))                   # what offload auto plans for
    try:
        ids = prompt_ids(engine, args, setting.context)
        rows, ar_ms = [], None
        for mode in setting.modes:
            row = measure_ours(engine, ids, dataclasses.replace(run, mode=mode), setting.repeats)
            ar_ms = row["ms_per_token"]["median"] if mode == "ar" else ar_ms
            row["speedup_vs_ar"] = round(ar_ms / row["ms_per_token"]["median"], 3) if ar_ms else None
            rows.append(row)
    finally:
        if hasattr(engine, "close"):   # the Ray client: shards and host arenas released
            engine.close()
    return dict(suite="repro", setting=setting.name, description=setting.description, paper=setting.paper,
                run={k: v for k, v in dataclasses.asdict(run).items()}, rows=rows)


def table_repro(report: dict) -> str:
    paper = report["paper"]
    body = []
    for r in report["rows"]:
        theirs = paper["baseline_ms"] if r["mode"] == "ar" else paper["triforce_ms"] if r["mode"] == "triforce" else None
        body.append([r["mode"], ms_cell(r["ms_per_token"]), fmt(theirs, ".0f"), fmt(r["speedup_vs_ar"], ".2f"),
                     fmt(paper["speedup"] if r["mode"] == "triforce" else None, ".2f"),
                     acceptance_cell(r["acceptance"]), fmt(r["tokens_per_target_pass"], ".2f")])
    return (f"{report['description']}; the paper's baseline: {paper['baseline']}\n\n"
            + markdown_table(["mode", "ours ms/token", "paper ms/token", "ours x ar", "paper speedup",
                              "acceptance", "tokens/target pass"], body))


register("repro", table=table_repro, help="the paper's GPU settings (--setting, --target, --draft)")(suite_repro)
