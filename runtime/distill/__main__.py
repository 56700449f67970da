"""`python -m runtime.distill ARGS` == `triforce distill ARGS`."""
import sys

from runtime.cli import main

sys.exit(main(["distill", *sys.argv[1:]]))
