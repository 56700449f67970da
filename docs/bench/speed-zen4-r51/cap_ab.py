"""The largest γ2 `--gamma auto` considers (gamma.GAMMA_CAPS[-1], which also caps Extension's run of drafts past γ2)
at other values, and `ar`, interleaved in one process on one kept prefill (ab_levels.py; greedy):
python cap_ab.py S NEW ROUNDS CAP... (the logs of this round printed fewer fields a line)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from ab_levels import interleave
from common import triforce_request
from triforce.runtime import gamma

S, NEW, R = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
args, eng, run, ids = triforce_request(S, 0.0, NEW)
cap = lambda c: (lambda: setattr(gamma, "GAMMA_CAPS", (gamma.GAMMA_CAPS[0], c)))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), cap(16)),
                              **{f"cap {c}": ({}, cap(int(c))) for c in sys.argv[4:]}})
