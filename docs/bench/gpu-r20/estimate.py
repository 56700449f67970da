"""GPU checklist item 5 as an estimate, not a measurement: `ar` and `triforce` ms/token on the H200
from the pass costs measured in call 1 (random weights; costs do not depend on values) and the
paper's acceptance (planner defaults: 0.35 drafter->middle, 0.9 middle->target), through the
same cost model --gamma auto uses (runtime/gamma.py: choose, seconds_per_token).

    python docs/bench/gpu-r20/estimate.py
"""
import json
from pathlib import Path

from triforce.runtime.gamma import PassCost, choose

HERE = Path(__file__).parent / "call1"
ALPHAS = [0.35, 0.9]


def costs(report, S, use_graph=False, flat_verify=False):
    """PassCost per level (drafter, retrieval, target) at context S; flat_verify: every T > 1 pass
    priced as its T = 1 pass (what a split-KV verify kernel gives at these T, the hypothesis the
    CausalBias change is meant to make true)."""
    out = []
    for level in ("drafter", "retrieval", "target"):
        rows = [r for r in report["rows"] if r["context"] == S and r["level"] == level]
        key = "graph_ms" if use_graph else "ms"
        pts = [(r["T"], r[key] / 1000) for r in rows]
        if flat_verify:
            pts = [(T, pts[0][1]) for T, _ in pts]
        out.append(PassCost(tuple(pts)))
    return out


def main():
    passes = json.loads((HERE / "passes.json").read_text())
    graphs = json.loads((HERE / "graphs.json").read_text())
    print("| context | passes | ar ms/token | triforce ms/token | γ1, γ2 | triforce / ar |")
    print("|---|---|---|---|---|---|")
    for S, report, label, g, flat in [(32000, passes, "eager, as measured", False, False),
                                      (65536, passes, "eager, as measured", False, False),
                                      (120000, passes, "eager, as measured", False, False),
                                      (120000, passes, "eager, verify at its T=1 cost", False, True),
                                      (32000, graphs, "eager, as measured (call 1's second run)", False, False),
                                      (32000, graphs, "CUDA graph replay", True, False),
                                      (32000, graphs, "CUDA graph, verify at its T=1 cost", True, True)]:
        c = costs(report, S, g, flat)
        ar = c[2](1)
        gammas, tri = choose(c, ALPHAS, [range(1, 9), range(1, 17)])
        print(f"| {S} | {label} | {1000 * ar:.1f} | {1000 * tri:.1f} | {gammas[0]}, {gammas[1]} | {ar / tri:.2f}x |")


if __name__ == "__main__":
    main()
