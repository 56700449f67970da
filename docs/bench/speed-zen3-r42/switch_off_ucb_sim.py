# Expected seconds per token of a 128-token request under --gamma auto's switch-off policy: the
# point estimate (today) against an optimistic one for switching off. Simulated target rounds on the
# 7K T = 0.6 probes (modes7k), middle level's acceptance of the drafter fixed at 0.55.
import math, random, sys
from triforce.runtime.gamma import (PassCost, choose, draft_seconds, smoothed_acceptance, EXPLORE_TOKENS, REPROBE_ROUNDS,
                                    PRIOR_WEIGHT, rounded)
drafter, middle, target = PassCost(((1, 0.00207),)), PassCost(((1, 0.00972), (2, 0.00972), (4, 0.01605), (5, 0.0173))), PassCost(((1, 0.02736), (13, 0.106)))
costs = [drafter, middle, target]; A_MID = 0.55
memo = {}
def pick(a, z, n):
    key = (rounded(a), z, n)
    if key not in memo:
        g, _ = choose(costs, [A_MID, rounded(a)], [range(0, 5), range(0, 13)])
        if g[1] == 0 and z > 0:
            up = min(0.99, a + z * math.sqrt(a * (1 - a) / (n + PRIOR_WEIGHT + 1)))
            g2, _ = choose(costs, [A_MID, rounded(up)], [range(0, 5), range(0, 13)])
            g = g2
        memo[key] = g
    return memo[key]
def run(true_a, z, seed, new=128, reprobe=REPROBE_ROUNDS):
    rnd = random.Random(seed); acc = rej = drafted = 0; idle = 0; t = 0.0; out = 0
    while out < new:
        a = smoothed_acceptance(acc, rej)
        g1, g2 = pick(a, z, acc + rej)
        if drafted < EXPLORE_TOKENS or idle >= reprobe: g2 = max(g2, 1)
        g2 = min(g2, new - out - 1) if new - out > 1 else 0
        if g2 == 0:
            t += target(1); out += 1; idle += 1; continue
        idle = 0
        t += draft_seconds(costs, [A_MID, true_a], (g1, g2), 1, g2) + target(g2 + 1)
        drafted += g2; k = 0
        while k < g2 and rnd.random() < true_a: k += 1
        acc += k; rej += k < g2; out += k + 1
    return t / out
if sys.argv[1:] == ["--reprobe"]:   # REPROBE_ROUNDS varied too: (z, reprobe) per column, 1,500 requests a cell
    variants = [(0, 32), (0, 16), (0, 8), (1.0, 32), (1.0, 16)]
    for true_a in (0.3, 0.45, 0.55, 0.65, 0.7, 0.75, 0.8, 0.85):
        row = [sum(run(true_a, z, s, reprobe=rp) for s in range(1500)) / 1500 * 1000 for z, rp in variants]
        print(f"alpha {true_a}: " + "  ".join(f"z{z}/r{rp} {v:.2f}" for (z, rp), v in zip(variants, row)))
    sys.exit(0)
for true_a in (0.3, 0.45, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9):
    row = []
    for z in (0, 1.0, 1.5, 2.0):
        runs = [run(true_a, z, s) for s in range(2000)]
        row.append(sum(runs) / len(runs) * 1000)
    print(f"alpha {true_a}: " + "  ".join(f"z={z} {v:.2f}" for z, v in zip((0, 1.0, 1.5, 2.0), row)) + f"  (ar {target(1)*1000:.2f})")
