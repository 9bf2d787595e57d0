"""``python -m graphgrad``: the same as the ``graphgrad`` command."""

import sys

from graphgrad.cli import main

sys.exit(main())
