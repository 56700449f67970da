"""Plots a person would rather look at than read: small PNGs (matplotlib, Agg backend)."""
from __future__ import annotations

from pathlib import Path

SIZE, DPI = (8.0, 3.2), 80   # inches, dots per inch: about 640 x 256 pixels, 20-50 KB per PNG


def pyplot():
    import matplotlib
    matplotlib.use("Agg")  # no display; must precede the pyplot import
    import matplotlib.pyplot as plt
    return plt


def save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    pyplot().close(fig)
    return path


def by_temperature_axes(temperatures: list[float]):
    plt = pyplot()
    fig, axes = plt.subplots(1, len(temperatures), figsize=SIZE, squeeze=False, sharey=True)
    return fig, dict(zip(temperatures, axes[0]))


def lines_by_mode(ax, rows: list[dict], y, ylabel: str, title: str, baseline: float | None = None) -> None:
    """One line per mode over the context lengths of `rows`."""
    for mode in dict.fromkeys(r["mode"] for r in rows):
        points = sorted((r["context"], y(r)) for r in rows if r["mode"] == mode and y(r) is not None)
        if points:
            ax.plot(*zip(*points), marker="o", label=mode)
    if baseline is not None:
        ax.axhline(baseline, color="gray", linewidth=0.8, linestyle="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context (tokens)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)


def plot_modes(report: dict, out: Path) -> list[Path]:
    rows = report["rows"]
    temperatures = sorted({r["temperature"] for r in rows})
    paths = []
    fig, axes = by_temperature_axes(temperatures)
    for t, ax in axes.items():
        lines_by_mode(ax, [r for r in rows if r["temperature"] == t], lambda r: r.get("speedup_vs_ar"),
                      "speedup over ar (x)", f"decode speedup, T = {t}", baseline=1.0)
    next(iter(axes.values())).legend(fontsize=8)
    paths.append(save(fig, out / "modes_speedup.png"))
    fig, axes = by_temperature_axes(temperatures)
    for t, ax in axes.items():
        lines_by_mode(ax, [r for r in rows if r["temperature"] == t], lambda r: r["acceptance"].get("target"),
                      "acceptance at the target", f"target acceptance, T = {t}")
    next(iter(axes.values())).legend(fontsize=8)
    paths.append(save(fig, out / "modes_acceptance.png"))
    return paths


def plot_sweep(rows: list[dict], param: str, label: str, path: Path) -> Path:
    """Acceptance per level (left) and speedup over ar (right) against one swept parameter."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=SIZE)
    categorical = any(isinstance(r["value"], str) for r in rows)
    xs = list(range(len(rows))) if categorical else [r["value"] for r in rows]
    for level in dict.fromkeys(name for r in rows for name in r["acceptance"]):
        shown = "drafter -> retrieval" if level == "retrieval" else "retrieval -> target" if level == "target" else level
        left.plot(xs, [r["acceptance"].get(level) for r in rows], marker="o", label=shown)
    left.set_ylim(0, 1.02)
    left.set_ylabel("acceptance")
    left.legend(fontsize=8)
    right.plot(xs, [r["speedup_vs_ar"] for r in rows], marker="o", color="C2")
    right.axhline(1.0, color="gray", linewidth=0.8, linestyle="--")
    right.set_ylabel("speedup over ar (x)")
    for ax, title in ((left, f"acceptance vs {label}"), (right, f"triforce speedup vs {label}")):
        ax.set_xlabel(label)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if categorical:
            ax.set_xticks(xs, [str(r["value"]) for r in rows], fontsize=8)
    return save(fig, path)


def plot_ablations(report: dict, out: Path) -> list[Path]:
    paths = []
    for param, label in report["sweeps"].items():
        rows = [r for r in report["rows"] if r["param"] == param]
        if rows:
            paths.append(plot_sweep(rows, param, label, out / f"ablations_{param}.png"))
    return paths


def plot_peers(report: dict, out: Path) -> list[Path]:
    """Decode ms/token per system, grouped by (dtype, temperature)."""
    plt = pyplot()
    rows = report["rows"]
    groups = list(dict.fromkeys((r["dtype"], r["temperature"]) for r in rows))
    systems = list(dict.fromkeys(r["system"] for r in rows))
    fig, ax = plt.subplots(figsize=SIZE)
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        heights = [next((r["ms_per_token"]["median"] for r in rows if (r["dtype"], r["temperature"]) == g
                         and r["system"] == system), 0) for g in groups]
        ax.bar([j + i * width for j in range(len(groups))], heights, width, label=system)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], [f"{d}, T = {t}" for d, t in groups])
    ax.set_ylabel("decode ms/token (lower is better)")
    ax.set_title(f"decode at {rows[0]['context']} tokens of context", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return [save(fig, out / "peers_decode.png")]
