"""The version of the simkit code (the distribution simkit-infonce carries the same, from pyproject.toml)."""

__version__ = "0.1.0"
