"""What every dataset records of its provenance: simkit's own version, whatever the distribution's name."""

import tomllib
from pathlib import Path

import pytest

from simkit.runner.provenance import PACKAGES, versions

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.deterministic(reason="metadata lookups; no random draw")
def test_simkit_version_is_the_projects_version_even_from_a_checkout():
    """The version comes from the imported code, so a run from a checkout on PYTHONPATH (no distribution) and
    an install under the distribution name simkit-infonce record the same: pyproject.toml's version."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    v = versions()
    assert v["simkit"] == project["version"] and v["simkit"] != "not installed"
    assert set(PACKAGES) <= set(v) and v["numpy"] != "not installed"
