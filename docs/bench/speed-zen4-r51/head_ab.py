"""The target's dense head against its certified greedy form (runtime/greedy_head.py), for `ar` and `triforce`,
interleaved in one process on one kept prefill: python head_ab.py S NEW ROUNDS (greedy). Prints each request's
ms/token, its time outside the passes and in CertifiedHead.greedy, then medians ("ar" is the dense head's)."""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "speed-zen4-r50"), os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from interleave import interleave, timer
from triforce.runtime.greedy_head import CertifiedHead

S, NEW, R = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
args, eng, run, ids = triforce_request(S, 0.0, NEW)
head = eng.model.lm_head
assert isinstance(head, CertifiedHead), type(head)
spent = timer(CertifiedHead, "greedy")
use = lambda h: (lambda: setattr(eng.model, "lm_head", h))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), use(head.dense)), "ar_cert": (dict(mode="ar"), use(head)),
                              "tf": ({}, use(head.dense)), "tf_cert": ({}, use(head))}, spent, "greedy head")
