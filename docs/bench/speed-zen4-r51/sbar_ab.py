"""Extension's bar for a sampled proposer (gamma.EXTEND_CONFIDENCE["sampled"]) at other values, and `ar`, interleaved
in one process on one kept prefill (ab_levels.py): python sbar_ab.py S T NEW ROUNDS BAR... Each round draws another
text (its seed), and a bar changes which uniforms each draft takes, so variants' texts differ: compare medians over
many rounds."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from ab_levels import interleave
from common import triforce_request
from triforce.runtime import gamma

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
bar = lambda b: (lambda: gamma.EXTEND_CONFIDENCE.__setitem__("sampled", b))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), bar(0.99)),
                              **{f"bar {b}": ({}, bar(float(b))) for b in sys.argv[5:]}})
