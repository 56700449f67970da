"""A greedy level's confidence in its drafts (speculate.top_probabilities) by the one-read native kernel (this
round: sampling.top_probability) against the softmax written out and its maximum read back (before), and `ar`,
interleaved in one process on one kept prefill: python conf_ab.py S T NEW ROUNDS. Prints each request's ms/token,
its time outside the passes and in Level.confidences, then medians."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from interleave import interleave, timer
from triforce.runtime import speculate
from triforce.runtime.sampling import SamplingParams, probs_from_logits

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
new_top, SOFTMAX = speculate.top_probability, SamplingParams(temperature=1.0, top_p=1.0)
old_top = lambda logits: probs_from_logits(logits, SOFTMAX).amax(-1)   # the code before
spent = timer(speculate.Level, "confidences")
use = lambda top: (lambda: setattr(speculate, "top_probability", top))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), use(new_top)), "softmax": ({}, use(old_top)),
                              "native": ({}, use(new_top))}, spent, "confidences")
