"""`python -m triforce.runtime.distill ARGS` == `triforce distill ARGS`."""
import sys

from triforce.runtime.cli import main

sys.exit(main(["distill", *sys.argv[1:]]))
