"""GPU checklist item 5 as an estimate, not a measurement: `ar` and `triforce` ms/token on the H200
from round 24's pass costs (call 1, random weights: costs do not depend on values) and the paper's
acceptance (the planner's defaults: 0.35 drafter->middle, 0.9 middle->target), through the cost model
--gamma auto uses (runtime/gamma.py: choose). Each level priced as the runtime now runs it: the
drafter and the middle level replayed from CUDA graphs (graph_ms), the target eagerly (ms).

    python docs/bench/gpu-r24/estimate.py
"""
import json
from pathlib import Path

from triforce.runtime.gamma import PassCost, choose

HERE = Path(__file__).parent / "call1"
ALPHAS = [0.35, 0.9]


def costs(report, S, lower="graph_ms", target="ms"):
    """PassCost per level (drafter, retrieval, target) at context S."""
    out = []
    for level, key in (("drafter", lower), ("retrieval", lower), ("target", target)):
        rows = [r for r in report["rows"] if r["context"] == S and r["level"] == level]
        out.append(PassCost(tuple((r["T"], r[key] / 1000) for r in rows)))
    return out


def main():
    report = json.loads((HERE / "passes_new.json").read_text())
    print("| context | lower levels | triforce ms/token | γ1, γ2 | ar eager ms/token | x ar eager | ar from a graph | x that |")
    print("|---|---|---|---|---|---|---|---|")
    for S in (32000, 120000):
        for label, lower in (("eager", "ms"), ("CUDA graphs", "graph_ms")):
            c = costs(report, S, lower)
            ar = c[2](1)
            ar_graph = costs(report, S, target="graph_ms")[2](1)   # the target's 1-token pass replayed (not built)
            gammas, tri = choose(c, ALPHAS, [range(1, 9), range(1, 17)])
            print(f"| {S} | {label} | {1000 * tri:.1f} | {gammas[0]}, {gammas[1]} | {1000 * ar:.1f} | {ar / tri:.2f}x "
                  f"| {1000 * ar_graph:.1f} | {ar_graph / tri:.2f}x |")


if __name__ == "__main__":
    main()
