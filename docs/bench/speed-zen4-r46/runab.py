"""RunConfig variants of one `triforce` request, interleaved in one process (--gamma auto; every
request after the first reuses the pass costs of its shape, as a batch job's would).
python runab.py S T NEW ROUNDS field=value[,field=value] ...   (a bare "base" is the run unchanged)
e.g. python runab.py 7000 0 128 3 base draft_window=1024"""
import dataclasses, os, statistics, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)


def variant(spec: str):
    if spec == "base":
        return run
    fields = {}
    for item in spec.split(","):
        name, value = item.split("=")
        kind = type(getattr(run, name))
        fields[name] = value if kind is str or getattr(run, name) is None and not value.isdigit() else \
            (int(value) if getattr(run, name) is None else kind(value))
    return dataclasses.replace(run, **fields)


variants = {spec: variant(spec) for spec in sys.argv[5:]}
res = {k: [] for k in variants}
for v in variants.values():
    eng.generate(ids, v)
for r in range(R):
    for name, v in variants.items():
        st = eng.generate(ids, dataclasses.replace(v, seed=r)).stats
        res[name].append(st["ms_per_token"])
        lv = st["levels"]
        print(name, r, st["ms_per_token"], "passes", st["target_passes"], "s", {k: x["seconds"] for k, x in lv.items()},
              "acc", {k: x.get("acceptance") for k, x in lv.items()}, dict(list(st.get("gamma", {}).get("rounds_per_choice", {}).items())[:3]),
              flush=True)
for k, v in res.items():
    print(k, "median ms/token %.3f mean %.3f" % (statistics.median(v), statistics.mean(v)), v)
