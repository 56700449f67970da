"""A/B of the target's start-up probe under --gamma auto, in one process: `line` times T = 1 and the
largest pass (the runtime's probe), `points` TOP_PROBE's lengths (1, 2, 4, 8). Every request probes
afresh (no costs reused). Needs probe_points.patch applied (git apply; not kept).
python probeab.py S T NEW ROUNDS"""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime import gamma as G

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
eng.stored_costs = False
points = G.top_probe_order
variants = {"line": lambda largest: ([1, largest], [t for t in G.probe_order(largest) if t not in (1, largest)]),
            "points": points}
res = {k: [] for k in variants}
eng.generate(ids, run)
for r in range(R):
    for name, order in variants.items():
        G.top_probe_order = order
        eng.pass_costs.clear()
        st = eng.generate(ids, dataclasses.replace(run, seed=r)).stats
        g = st["gamma"]
        res[name].append(st["ms_per_token"])
        print(name, r, st["ms_per_token"], "passes", st["target_passes"], "probe_s", g["probe_s"],
              "target ms", g["probe_pass_ms"]["target"], dict(list(g["rounds_per_choice"].items())[:4]),
              "ext", g["extension"]["tokens"], flush=True)
for k, v in res.items():
    print(k, "median ms/token %.3f mean %.3f" % (statistics.median(v), statistics.mean(v)), v)
