"""Scratch: run the triforce CLI with gamma.PROBE_POINTS from $PROBE (comma list)."""
import os, sys
import triforce.runtime.gamma as g
if os.environ.get("PROBE"):
    g.PROBE_POINTS = tuple(int(x) for x in os.environ["PROBE"].split(","))
from triforce.runtime.cli import main
sys.exit(main(sys.argv[1:]))
