"""Provenance recorded in every dataset: git commit, package versions, platform."""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import platform
import subprocess
from pathlib import Path

from simkit.version import __version__

__all__ = ["git_commit", "changed_files", "diff_sha256", "versions", "platform_text", "OUTPUT_DIRS"]

#: repository directories holding outputs, not source (ignored by the "-dirty" mark of git_commit)
OUTPUT_DIRS = ("data", "reports", "benchmarks/results")

#: packages whose versions every dataset records, besides simkit's own (``simkit.__version__``, the code that ran:
#: the distribution is named simkit-infonce, and a checkout on ``PYTHONPATH`` has no distribution at all)
PACKAGES = ("numpy", "scipy", "numba", "statsmodels", "xarray", "h5netcdf", "netCDF4", "matplotlib")


def _git(*args: str) -> subprocess.CompletedProcess | None:
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out if out.returncode == 0 else None


#: git pathspecs of the tracked source (the outputs excluded: a study run rewrites them)
_SOURCE = (":(top)", *(f":(top,exclude){p}" for p in OUTPUT_DIRS))


def changed_files() -> list[str] | None:
    """Tracked source files that differ from HEAD in the checkout simkit is imported from (datasets,
    reports and benchmark results do not count); ``None`` outside a git checkout."""
    out = _git("status", "--porcelain", "--untracked-files=no", "--", *_SOURCE)
    return None if out is None else sorted(line[3:] for line in out.stdout.splitlines() if line.strip())


def diff_sha256() -> str | None:
    """SHA-256 of ``git diff HEAD`` over the tracked source: with the commit, it pins what a run from a
    modified work tree ran. ``None`` outside a git checkout."""
    out = _git("diff", "HEAD", "--", *_SOURCE)
    return None if out is None else hashlib.sha256(out.stdout.encode()).hexdigest()


def git_commit() -> str:
    """HEAD of the checkout simkit is imported from, "-dirty" when tracked source differs
    (:func:`changed_files`); "unknown" outside a git checkout."""
    head = _git("rev-parse", "HEAD")
    changed = changed_files()
    if head is None or changed is None:
        return "unknown"
    return head.stdout.strip() + ("-dirty" if changed else "")


def versions() -> dict[str, str]:
    """Python's, simkit's (the imported code's) and every recorded package's version ("not installed" where absent)."""
    out = {"python": platform.python_version(), "simkit": __version__}
    for pkg in PACKAGES:
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def platform_text() -> str:
    return f"{platform.platform()}; {os.cpu_count()} CPUs"
