# Round 39: what the 32K aim (triforce >= 1.6x ar) needs on this CPU, by --gamma auto's own cost
# model (runtime/gamma.py: choose, seconds_per_token), fed this CPU's measured 32K pass costs:
# the target's T-token passes as multiples of its 1-token pass (round 38's passes suite: T = 2
# 1.1-1.2x, T = 3 1.4-1.6x, T = 4 ~1.6x; T = 13 323 ms), the middle level's (12.1 / 14.0 / 20.8 /
# 23.6 ms at T = 1 / 2 / 4 / 5, budget 2,192) and the drafter's 1.5 ms. Draft rounds only (the
# context-lookup copies come on top). Prints the γs chosen and the predicted speed-up over `ar`
# as the target's per-token acceptance of the middle level's drafts (α) grows, for today's costs,
# a middle level at 0.6x, and verify passes nearer the FMA floor.
#   python docs/bench/speed-zen3-r39/cost_model_32k.py
from triforce.runtime.gamma import PassCost, choose

t1 = 0.066
for label, r2, r3, r4 in [("verify passes as measured", 1.17, 1.43, 1.6), ("cheaper verify passes", 1.08, 1.25, 1.4)]:
    target = PassCost(((1, t1), (2, r2 * t1), (3, r3 * t1), (4, r4 * t1), (13, 0.323)))
    for mid_scale in (1.0, 0.6):
        middle = PassCost(tuple((T, s * mid_scale) for T, s in ((1, .0121), (2, .014), (4, .0208), (5, .0236))))
        drafter = PassCost(((1, .0015),))
        cells = []
        for alpha in (0.7, 0.75, 0.8, 0.85, 0.9):
            gammas, s = choose([drafter, middle, target], [0.5, alpha], [range(0, 5), range(0, 13)])
            cells.append(f"α {alpha}: γ {gammas} {t1 / s:.2f}x")
        print(f"{label}, middle level x{mid_scale}: " + " | ".join(cells))
