"""CF-1.11 checks shared by the tests: the IOOS compliance-checker in strict mode, and udunits reading
every unit as dimensionless (losses in nats are "1"; "nat" would read as a pressure)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHECKER = Path(sys.executable).parent / "compliance-checker"


def compliance(path: Path | str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """``compliance-checker -t cf:1.11 -c strict PATH`` (the venv's, else the module's entry point)."""
    cmd = [str(CHECKER)] if CHECKER.exists() else [sys.executable, "-m", "compliance_checker.cfutil"]
    return subprocess.run([*cmd, "-t", "cf:1.11", "-c", "strict", str(path)], capture_output=True, text=True,
                          timeout=timeout)


def assert_cf_strict(path: Path | str) -> None:
    proc = compliance(path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def assert_dimensionless(ds) -> None:
    """Every variable and coordinate of ``ds`` has a unit udunits reads as dimensionless."""
    import cf_units

    for name in list(ds.data_vars) + list(ds.coords):
        assert cf_units.Unit(ds[name].attrs["units"]).is_dimensionless(), (name, ds[name].attrs["units"])
