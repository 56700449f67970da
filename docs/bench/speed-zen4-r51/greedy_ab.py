"""Greedy rounds by argmaxes (this round: speculate.verify_round's T = 0 branch, accept.accept_greedy) against the
one-hot distributions written and the acceptance rule reading them back (speculate.py at REV, loaded beside it),
for `ar` and `triforce`, interleaved in one process on one kept prefill: python greedy_ab.py S NEW ROUNDS REV.
Prints each request's ms/token and its time outside the passes, then medians ("ar" runs REV's code)."""
import os, subprocess, sys, types
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(here, "..", "speed-zen4-r50"), os.path.join(here, "..", "speed-zen4-r45")]
from common import triforce_request
from interleave import interleave
from triforce.runtime import speculate

S, NEW, R, REV = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
old = types.ModuleType("speculate_old")
sys.modules["speculate_old"] = old   # its dataclasses look their module up
exec(compile(subprocess.check_output(["git", "show", f"{REV}:runtime/speculate.py"], text=True), "speculate_old", "exec"),
     old.__dict__)
args, eng, run, ids = triforce_request(S, 0.0, NEW)
new_fns = (speculate.verify_round, speculate.draft)
use = lambda fns: (lambda: (setattr(speculate, "verify_round", fns[0]), setattr(speculate, "draft", fns[1])))
old_fns = (old.verify_round, old.draft)
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), use(old_fns)), "ar_new": (dict(mode="ar"), use(new_fns)),
                              "tf": ({}, use(old_fns)), "tf_new": ({}, use(new_fns))}, [0.0], "-")
