"""`--gamma auto` with its pass costs corrected by every pass (round 48) or by the passes of the lengths its
probe timed (round 49): one process per variant (OLD=1: round 48's correction), each with its own stored pass
costs ($TRIFORCE_CACHE), so that neither starts from the other's. python gamma_ab.py S T NEW REQUESTS
Prints each request's ms/token, the drafter's corrected 1-token cost, the level passes, and the medians."""
import os, sys, dataclasses, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from triforce.runtime import gamma


def round48(probed, recent):
    ratios = [s / probed(T) for T, s in recent if probed(T) > 0]
    if len(ratios) < gamma.SEEN_PASSES:
        return probed
    scale = statistics.median(ratios)
    return gamma.PassCost(tuple((T, s * scale) for T, s in probed.points))


if os.environ.get("OLD") == "1":
    gamma.corrected = round48
from common import triforce_request

S, T, NEW, N = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
ms = []
for i in range(N):
    st = eng.generate(ids, dataclasses.replace(run, seed=i)).stats
    ms.append(st["ms_per_token"])
    g = st["gamma"]
    print(f"{'old' if os.environ.get('OLD') == '1' else 'new'} {st['ms_per_token']:.2f} ms/token; drafter 1-token "
          f"{g['pass_ms']['drafter']['1']} ms; choices {g['rounds_per_choice']}; passes "
          + " ".join(f"{n} {x['passes']}" for n, x in st["levels"].items()), flush=True)
print(f"{'old' if os.environ.get('OLD') == '1' else 'new'} median {statistics.median(ms[1:]):.2f} ms/token (after the first)", flush=True)
