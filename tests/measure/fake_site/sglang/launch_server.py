"""`python -m sglang.launch_server` for the sweep tests: the stand-in server (test scaffold)."""

import sys

from tests.measure.fakesglang import main

if __name__ == "__main__":
    main(sys.argv[1:])
