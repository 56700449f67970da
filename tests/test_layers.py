"""Layers depend only downward (STYLE.md rule 11), checked on the source: every import of every
module in runtime/, offload/ and actors/ (at the top or inside a function: a lazy import that
goes upward is still a cycle) must go to the same layer or a lower one, and the import graph has
no cycle. An exception needs an entry in ALLOWED with the reason.

The layers, lowest first:
  leaf     imports nothing of the project but other leaves: errors, the hardware probes (probes),
           the shared run flags (flags), file helpers (io_utils), the embedded assets (assets)
  core     the model and the algorithm, in-process and plain: config, model, rope, attention,
           the caches, sampling, accept, speculate, the decode loop (decode), parallel (TP/PP
           transforms of a plain model), the embedded drafter (drafter)
  offload  host tier, offloaded KV, streamed weights, the placement planner (offload/plan.py;
           it also holds the `triforce plan` command, which needs nothing above this layer)
  engine   the in-process composition of core and offload for one request (engine) and for a
           batch of them (batched). STYLE lists the engine with the core; it sits above offload
           because it applies offload as a transform (rule 7), so it imports offload/.
  actors   the Ray shells over the engine, core and offload
  apps     what users run: backends (chooses local or Ray), batch, bench, distill
  entry    cli: the `triforce` command, which registers every application's subcommand; the
           `python -m` shells that call it
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("triforce.runtime", "triforce.offload", "triforce.actors")

LAYERS = {
    "leaf": ["triforce.runtime.errors", "triforce.runtime.probes", "triforce.runtime.flags", "triforce.runtime.io_utils", "triforce.runtime.assets",
             "triforce.runtime.durable"],
    "core": ["triforce.runtime", "triforce.runtime.config", "triforce.runtime.model", "triforce.runtime.rope", "triforce.runtime.attention", "triforce.runtime.cache",
             "triforce.runtime.cache_full", "triforce.runtime.cache_retrieval", "triforce.runtime.cache_streaming", "triforce.runtime.cache_packed",
             "triforce.runtime.sampling", "triforce.runtime.accept", "triforce.runtime.speculate", "triforce.runtime.decode", "triforce.runtime.parallel",
             "triforce.runtime.drafter", "triforce.runtime.modes", "triforce.runtime.gamma", "triforce.runtime.native", "triforce.runtime.ops", "triforce.runtime.quant",
             "triforce.runtime.vocab", "triforce.runtime.placement"],
    "triforce.offload": ["triforce.offload", "triforce.offload.*"],
    "engine": ["triforce.runtime.engine", "triforce.runtime.decode_batched"],
    "triforce.actors": ["triforce.actors", "triforce.actors.*"],
    "apps": ["triforce.runtime.run_args", "triforce.runtime.backends", "triforce.runtime.batch", "triforce.runtime.batch_input", "triforce.runtime.batch_output",
             "triforce.runtime.batch_replicas", "triforce.runtime.bench", "triforce.runtime.bench.*", "triforce.runtime.distill", "triforce.runtime.distill.*"],
    "entry": ["triforce.runtime.cli", "triforce.runtime.distill.__main__"],
}
ORDER = list(LAYERS)

# (importer, imported): why the edge is allowed although it goes up or closes a cycle.
ALLOWED: dict[tuple[str, str], str] = {
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("triforce", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Project modules `path` imports anywhere in its body. `from pkg import mod` is an edge to
    pkg.mod (not to pkg's __init__, which Python runs first but which is not what is used)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                name = f"{node.module}.{a.name}"
                found |= {name} if name in modules else {node.module} & modules.keys()
    return found


def layer_of(module: str) -> str:
    """The layer that names the module, else the one whose `pkg.*` holds it."""
    for exact in (True, False):
        for layer, patterns in LAYERS.items():
            if any(module == p if exact else p.endswith(".*") and module.startswith(p[:-1]) for p in patterns):
                return layer
    raise AssertionError(f"{module} is in no layer; add it to LAYERS in {__file__}")


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {m: {d for d in imports(p, modules) if d != m and (m, d) not in ALLOWED} for m, p in modules.items()}


def test_project_imports_go_through_the_triforce_namespace():
    """The packages install as triforce.runtime, triforce.actors, triforce.offload (pyproject's
    package-dir): a bare `import runtime...` would only work from the repo root, or load a second copy."""
    bare = []
    for p in sorted(ROOT.rglob("*.py")):
        if ".venv" in p.parts or "build" in p.parts:
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
            bare += [f"{p.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in PACKAGES]
    assert not bare, "imports outside the triforce namespace:\n" + "\n".join(bare)


def test_every_module_has_a_layer():
    for m in project_modules():
        layer_of(m)


def test_imports_go_down_or_sideways():
    upward = [f"{m} ({layer_of(m)}) imports {d} ({layer_of(d)})"
              for m, deps in graph().items() for d in sorted(deps)
              if ORDER.index(layer_of(d)) > ORDER.index(layer_of(m))]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycles():
    g, state, cycles = graph(), {}, []

    def visit(m, path):
        state[m] = "open"
        for d in sorted(g[m]):
            if state.get(d) == "open":
                cycles.append(" -> ".join(path[path.index(d):] + [d]))
            elif d not in state:
                visit(d, path + [d])
        state[m] = "done"

    for m in sorted(g):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_allowed_edges_exist():
    """An exception that no longer occurs is deleted, so the list stays the list of debts."""
    modules = project_modules()
    stale = [edge for edge in ALLOWED if edge[1] not in imports(modules[edge[0]], modules)]
    assert not stale, f"ALLOWED entries that no longer occur: {stale}"
