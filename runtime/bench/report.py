"""Writing a suite's report: NAME.json (every raw figure + the machine + the command), NAME.md
(the table a person reads) and NAME_*.png (the plots). A report with `parts` (the smoke suite)
writes each part's files as well."""
from __future__ import annotations

import json
from pathlib import Path


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value, spec: str = ".1f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def ms_cell(ms: dict) -> str:
    """'median (min-max)' of a spread() dict; a single sample shows as its value."""
    if ms["min"] == ms["max"]:
        return f"{ms['median']:.1f}"
    return f"{ms['median']:.1f} ({ms['min']:.1f}-{ms['max']:.1f})"


def acceptance_cell(acceptance: dict, copied: dict | None = None) -> str:
    """Each verifier's acceptance of model drafts, then of copied ones (lookup.py): accepted/copied."""
    cells = [f"{name} {value:.2f}" for name, value in acceptance.items()]
    cells += [f"{name} copies {accepted}/{n}" for name, (accepted, n) in (copied or {}).items()]
    return ", ".join(cells) or "-"


def header(report: dict) -> str:
    """Two lines: the command and the machine."""
    m = report.get("machine", {})
    gpu = ", ".join(g["name"] for g in m.get("gpus", [])) or "no GPU"
    return (f"`{report.get('command', '')}`\n\n"
            f"{m.get('cpu', '?')}, {m.get('cpus_usable', '?')} usable cores, {m.get('torch_threads', '?')} torch "
            f"threads, {gpu}; torch {m.get('torch', '?')}, transformers {m.get('transformers', '?')}\n")


def write_report(report: dict, suite, out: Path, suites: dict) -> list[Path]:
    """Writes the files of `report` (and of its parts) under `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, part in report.get("parts", {}).items():
        part.update(machine=report.get("machine"), command=report.get("command"))
        written += write_report(part, suites[name], out, suites)
    if suite.plots:
        report["plots"] = [p.name for p in suite.plots(report, out)]
        written += [out / p for p in report["plots"]]
    md = out / f"{suite.name}.md"
    md.write_text(f"# bench: {suite.name}\n\n{header(report)}\n{suite.table(report)}\n")
    js = out / f"{suite.name}.json"
    js.write_text(json.dumps(report, indent=1, default=str))
    return written + [md, js]
