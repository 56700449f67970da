# switch_off_ucb_sim.py's model, with REPROBE_ROUNDS varied too (z: the optimistic estimate's width, 0 = today's rule)
import math, os, random, sys
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "switch_off_ucb_sim.py")).read().split("for true_a in")[0])
import triforce.runtime.gamma as G
def run2(true_a, z, seed, reprobe, new=128):
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
variants = [(0, 32), (0, 16), (0, 8), (1.0, 32), (1.0, 16)]
for true_a in (0.3, 0.45, 0.55, 0.65, 0.7, 0.75, 0.8, 0.85):
    row = [sum(run2(true_a, z, s, rp) for s in range(1500)) / 1500 * 1000 for z, rp in variants]
    print(f"alpha {true_a}: " + "  ".join(f"z{z}/r{rp} {v:.2f}" for (z, rp), v in zip(variants, row)))
