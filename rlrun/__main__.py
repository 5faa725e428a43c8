"""`python -m rlrun` is the `rlrun` command."""

import sys

from rlrun.cli import main

sys.exit(main())
