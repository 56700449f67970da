"""The middle level's context copies (lookup.copy with min_match NGRAM: the levels below the target) under other
rules, and `ar`, interleaved in one process on one kept prefill (ab_levels.py): python copy_ab.py S T NEW ROUNDS
VARIANT... (VARIANT: cur | none | matchN (a match of at least N tokens) | capN (at most N tokens copied)).
(The log of this round printed fewer fields a line.)"""
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from ab_levels import interleave
from common import triforce_request
from triforce.runtime import lookup

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
args, eng, run, ids = triforce_request(S, T, NEW)
real = lookup.ContextLookup.copy


def rule(name):
    def copy(self, seq, room, min_match):
        if min_match != lookup.NGRAM or name == "cur":
            return real(self, seq, room, min_match)
        if name == "none":
            return []
        if name.startswith("match"):
            return real(self, seq, room, int(name[5:]))
        return real(self, seq, min(room, int(name[3:])), min_match)
    return lambda: setattr(lookup.ContextLookup, "copy", copy)


interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), rule("cur")), **{n: ({}, rule(n)) for n in sys.argv[5:]}})
