"""What one `--gamma auto` choice costs (gamma.choose over γ1 0..4 and γ2 0..12, a 32K request's pass costs and
acceptances), this tree's and, given, an older gamma.py's, in one run:
git show 5a6fbca:runtime/gamma.py > /tmp/gamma_old.py && python choose_time.py /tmp/gamma_old.py
Prints each one's choice and microseconds a call (mean of 500, three alternations)."""
import importlib.util, sys, time
from triforce.runtime import gamma

modules = {"this tree": gamma}
if len(sys.argv) > 1:
    spec = importlib.util.spec_from_file_location("gamma_old", sys.argv[1])
    old = sys.modules["gamma_old"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    modules = {"old": old, **modules}
for rep in range(3):
    for name, G in modules.items():
        costs = [G.PassCost(((1, 0.0003),)), G.PassCost(((1, 0.0048), (5, 0.008))), G.PassCost(((1, 0.0238), (13, 0.0862)))]
        args = (costs, [0.59, 0.75], [range(0, 5), range(0, 13)])
        for _ in range(20):
            G.choose(*args)
        start = time.perf_counter()
        for _ in range(500):
            choice = G.choose(*args)
        print(rep, f"{name:9s}", choice, f"{(time.perf_counter() - start) / 500 * 1e6:.0f} us a call", flush=True)
