"""``python -m simkit ...``: the same command line as ``simkit ...``."""

from __future__ import annotations

import sys

from simkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
