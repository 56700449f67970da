"""Extension's bar for a greedy proposer (gamma.EXTEND_CONFIDENCE["greedy"]: drafts go on past γ2 while the middle
level's top probability is at least this) at other values, and `ar`, interleaved in one process on one kept prefill
(ab_levels.py): python bar_ab.py S NEW ROUNDS BAR... (the logs of this round printed fewer fields a line)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from ab_levels import interleave
from common import triforce_request
from triforce.runtime import gamma

S, NEW, R = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
args, eng, run, ids = triforce_request(S, 0.0, NEW)
bar = lambda b: (lambda: gamma.EXTEND_CONFIDENCE.__setitem__("greedy", b))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), bar(0.6)),
                              **{f"bar {b}": ({}, bar(float(b))) for b in sys.argv[4:]}})
