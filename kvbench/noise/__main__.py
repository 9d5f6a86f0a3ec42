"""`python -m kvbench.noise send HOST PORT ...`: the sender's former entry point, kept working.

The tcp generator now starts `python -m kvbench.noise.sender HOST PORT ...` (sender.py); this
forwards the old spelling there, with the same stdlib-only start.
"""

import sys

from kvbench.noise.sender import main

if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] != ["send"]:
        print("usage: python -m kvbench.noise send HOST PORT [options]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(args[1:], prog="python -m kvbench.noise send"))
