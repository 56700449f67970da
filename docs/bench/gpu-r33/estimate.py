"""GPU checklist item 5 as an estimate, not a measurement: `ar` and `triforce` ms/token on the H200
from round 33's pass costs (random weights: costs do not depend on values) and the paper's
acceptance (the planner's defaults: 0.35 drafter->middle, 0.9 middle->target), through the cost
model --gamma auto uses (runtime/gamma.py: choose). Each level priced as the runtime ran it in
round 24 and as it runs it now:

    round 24   the drafter and the middle level replayed whole, the target eager   (call 2: graph_ms, graph_ms, ms)
    round 33   the drafter replayed whole, the middle level's and the target's     (call 2: graph_ms; call 4: graph_ms)
               1-token passes whole and longer ones in pieces

    python docs/bench/gpu-r33/estimate.py
"""
import json
from pathlib import Path

from triforce.runtime.gamma import PassCost, choose

HERE = Path(__file__).parent
ALPHAS = [0.35, 0.9]


def cost(report, S, level, key) -> PassCost:
    rows = [r for r in report["rows"] if r["context"] == S and r["level"] == level]
    return PassCost(tuple((r["T"], r[key] / 1000) for r in rows))


def main():
    call2 = json.loads((HERE / "call2" / "passes.json").read_text())
    call4 = json.loads((HERE / "call4" / "passes.json").read_text())
    print("| context | runtime | `ar` ms/token | `triforce` ms/token | γ1, γ2 | x |")
    print("|---|---|---|---|---|---|")
    for S in (32000, 120000):
        runs = {"round 24": [cost(call2, S, "drafter", "graph_ms"), cost(call2, S, "retrieval", "graph_ms"),
                             cost(call2, S, "target", "ms")],
                "round 33": [cost(call2, S, "drafter", "graph_ms"), cost(call4, S, "retrieval", "graph_ms"),
                             cost(call4, S, "target", "graph_ms")]}
        for label, levels in runs.items():
            ar = levels[2](1)
            gammas, tri = choose(levels, ALPHAS, [range(1, 9), range(1, 17)])
            print(f"| {S} | {label} | {1000 * ar:.1f} | {1000 * tri:.1f} | {gammas[0]}, {gammas[1]} | {ar / tri:.2f}x |")


if __name__ == "__main__":
    main()
