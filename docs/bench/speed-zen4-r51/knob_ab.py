"""A module-level setting of the runtime at other values, and `ar`, interleaved in one process on one kept prefill
(ab_levels.py): python knob_ab.py S T NEW ROUNDS MODULE.NAME VALUE... (e.g. speculate.TARGET_MATCH 8 6; the first
value is the runtime's own)."""
import importlib, os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "speed-zen4-r45")]
from ab_levels import interleave
from common import triforce_request

S, T, NEW, R = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
module, name = sys.argv[5].rsplit(".", 1)
owner = importlib.import_module(f"triforce.runtime.{module}")
values = [type(getattr(owner, name))(v) for v in sys.argv[6:]]
args, eng, run, ids = triforce_request(S, T, NEW)
put = lambda v: (lambda: setattr(owner, name, v))
interleave(eng, run, ids, R, {"ar": (dict(mode="ar"), put(values[0])), **{f"{name} {v}": ({}, put(v)) for v in values}})
