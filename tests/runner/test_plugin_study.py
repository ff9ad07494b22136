"""A study from another package (tests/data/plugin_study, the example of docs/writing-a-study.md),
installed with pip into a separate directory, is found by ``simkit list`` and runs with
``simkit run`` — through the ``simkit.studies`` entry-point group alone (deterministic check)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simkit.runner import read_dataset

HERE = Path(__file__).resolve().parents[1]  # tests/
SIMKIT = Path(sys.executable).parent / "simkit"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip-install the plugin (no dependencies, no build isolation: offline) into its own target."""
    root = tmp_path_factory.mktemp("plugin")
    src = root / "src"
    shutil.copytree(HERE / "data" / "plugin_study", src)
    target = root / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--target", str(target), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), os.environ.get("PYTHONPATH", "")]))
    return root, env


def _simkit(*args, env, cwd):
    cmd = [str(SIMKIT)] if SIMKIT.exists() else [sys.executable, "-m", "simkit.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_plugin_study_is_listed_and_runs(installed):
    root, env = installed
    listed = _simkit("list", env=env, cwd=root)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert "coinflip" in names and "rate_k" in names
    out = root / "coinflip.nc"
    run = _simkit("run", "coinflip", "--quick", "--out", str(out), "--report", str(root / "coinflip.pdf"),
                  "--no-progress", env=env, cwd=root)
    assert run.returncode == 0, run.stderr
    assert "heads:" in run.stdout and (root / "coinflip.pdf").stat().st_size > 1000
    ds = read_dataset(out)
    assert ds.attrs["study"] == "coinflip" and ds.attrs["Conventions"] == "CF-1.11"
    assert ds["mean"].attrs["long_name"] == "fraction of heads" and ds.sizes["block"] == 8


def test_without_the_plugin_the_study_is_unknown(installed, tmp_path):
    """Negative control: the same command without the plugin on the path names the known studies, exit 2."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = _simkit("run", "coinflip", "--quick", "--out", str(tmp_path / "c.nc"), env=env, cwd=tmp_path)
    assert run.returncode == 2 and "unknown study 'coinflip'" in run.stderr
    assert not (tmp_path / "c.nc").exists()
