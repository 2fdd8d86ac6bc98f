import sys

from xputune.cli.entry import main

sys.exit(main())
