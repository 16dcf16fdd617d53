"""``python -m rl_suite``: the same command line as ``rl-suite``."""

import sys

from ._cli import main

sys.exit(main())
