"""`python -m sglang.launch_server` for the sweep's deadline tests: a hostile server."""

import sys

from tests.measure.hostile import main

if __name__ == "__main__":
    main(sys.argv[1:])
