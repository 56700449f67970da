"""The registry of `triforce bench` suites: one function per suite, registered by name.

A suite is a function `args -> report` (report: a JSON-ready dict with at least `suite` and
`rows`), a Markdown renderer and, optionally, a plotter. To add a suite, write one function in its
own module under runtime/bench/, decorate it with `@register("name", table=..., plots=...)`, and
import that module in runtime/bench/__init__.py.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from triforce.runtime.errors import UserError


@dataclass(frozen=True)
class Suite:
    name: str                                         # --suite NAME
    run: Callable[[argparse.Namespace], dict]         # parsed flags -> report {suite, rows, ...}
    table: Callable[[dict], str]                      # report -> Markdown (printed and written as NAME.md)
    plots: Callable[[dict, Path], list[Path]] | None  # report, out dir -> PNG files written
    help: str                                         # one line for `triforce bench --help`


SUITES: dict[str, Suite] = {}


def register(name: str, *, table: Callable[[dict], str], plots=None, help: str):
    """Decorator: registers `fn(args) -> report` as suite `name`."""
    def wrap(fn):
        if name in SUITES:
            raise ValueError(f"bench suite {name!r} registered twice")
        SUITES[name] = Suite(name, fn, table, plots, help)
        return fn
    return wrap


def get_suite(name: str) -> Suite:
    if name in SUITES:
        return SUITES[name]
    raise UserError(f"unknown bench suite {name!r}; available: {', '.join(sorted(SUITES))}")
