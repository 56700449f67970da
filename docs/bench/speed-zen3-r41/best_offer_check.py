# 71d1eb1's refactor check: copy_length through gamma.best_offer against its old expression, on random
# piecewise-linear pass costs and acceptances (prints how many of the cases differ).
import random
from triforce.runtime.gamma import PassCost, copy_length, expected_tokens
def old(cost, alpha, most):
    return max(range(1, most + 1), key=lambda n: (expected_tokens(alpha, n) / cost(n + 1), -n))
rnd = random.Random(0); n = differ = 0
for _ in range(20000):
    t, points = 0.01 + 0.05 * rnd.random(), []
    for p in sorted({1, rnd.randint(2, 8), 13, 17}):
        points.append((p, t)); t += rnd.random() * 0.03 * rnd.choice([0, 0.1, 1, 3])
    cost = PassCost(tuple(points))
    for alpha in (rnd.random(), round(rnd.random(), 2), 1.0, 0.0):
        for most in (1, 5, 16):
            n += 1; differ += old(cost, alpha, most) != copy_length(cost, alpha, most)
print(n, "cases,", differ, "differ")
