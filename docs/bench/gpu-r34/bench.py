"""`triforce bench ARGS` with the glue ops compiled (fused) or torch's own kernels (unfused):
python3 docs/bench/gpu-r34/bench.py fused|unfused ARGS..."""
import sys

from triforce.runtime import ops
from triforce.runtime.cli import main

ops.FUSE_CUDA = sys.argv[1] == "fused"
sys.exit(main(["bench"] + sys.argv[2:]))
