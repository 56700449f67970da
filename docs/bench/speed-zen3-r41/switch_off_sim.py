# How often --gamma auto's smoothed acceptance falls below break-even early and switches the middle
# level off (gammas (., 0): plain `ar` until the reprobe), for a true per-token acceptance alpha of the
# target. Pass costs: the 7K T = 0.6 run's probes (modes7k/modes.json). Simulated rounds, no model.
import random
from triforce.runtime.gamma import PassCost, choose, smoothed_acceptance, EXPLORE_TOKENS
drafter, middle, target = PassCost(((1, 0.00207),)), PassCost(((1, 0.00972), (2, 0.00972), (4, 0.01605), (5, 0.0173))), PassCost(((1, 0.02736), (13, 0.106)))
for true_a in (0.7, 0.75, 0.8, 0.85):
    off = 0; runs = 2000
    for r in range(runs):
        rnd = random.Random(r); acc = rej = drafted = 0; a_mid = 0.55
        for rounds in range(60):
            alpha = smoothed_acceptance(acc, rej)
            (g1, g2), _ = choose([drafter, middle, target], [a_mid, round(alpha, 2)], [range(0, 5), range(0, 13)])
            if drafted < EXPLORE_TOKENS: g2 = max(g2, 1)
            if g2 == 0: off += 1; break
            drafted += g2
            for k in range(g2):
                if rnd.random() < true_a: acc += 1
                else: rej += 1; break
    print(f"true per-token acceptance {true_a}: switched off within 60 rounds in {off / runs:.1%} of runs")
