"""Compatibility alias of :mod:`simkit.runner` (the study runner), for code written against
simkit 0.1's ``simkit.engine``. New code imports from :mod:`simkit.runner`."""

from __future__ import annotations

from simkit.runner import *  # noqa: F401,F403
from simkit.runner import __all__  # noqa: F401
