"""Provenance recorded in every dataset: git commit, package versions, platform."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path

__all__ = ["git_commit", "versions", "platform_text", "OUTPUT_DIRS"]

#: repository directories holding outputs, not source (ignored by the "-dirty" mark of git_commit)
OUTPUT_DIRS = ("data", "reports", "benchmarks/results")

#: packages whose versions every dataset records
PACKAGES = ("simkit", "numpy", "scipy", "numba", "statsmodels", "xarray", "h5netcdf", "netCDF4", "matplotlib")


def git_commit() -> str:
    """HEAD of the checkout simkit is imported from, "-dirty" when tracked source differs; "unknown"
    outside a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return "unknown"
        commit = out.stdout.strip()
        # the outputs (datasets, reports, benchmark results) do not count: a study run rewrites them
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no", "--",
                                ":(top)", *(f":(top,exclude){p}" for p in OUTPUT_DIRS)],
                               capture_output=True, text=True, timeout=10)
        return commit + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def versions() -> dict[str, str]:
    """Python's and every recorded package's version ("not installed" where absent)."""
    out = {"python": platform.python_version()}
    for pkg in PACKAGES:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def platform_text() -> str:
    return f"{platform.platform()}; {os.cpu_count()} CPUs"
