"""What ``import simkit`` does to the environment: GOMP_SPINCOUNT only, and only when unset
(deterministic checks in fresh interpreters; the measurements behind the value are in
simkit/__init__.py and the README)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = "import os, simkit; print(os.environ.get('GOMP_SPINCOUNT'))"


def _spincount_after_import(env_value):
    env = {k: v for k, v in os.environ.items() if k != "GOMP_SPINCOUNT"}
    if env_value is not None:
        env["GOMP_SPINCOUNT"] = env_value
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_import_sets_a_short_spin_count_when_unset():
    # not 0: with 0, PyTorch imported after simkit shares the sleeping libgomp (6-13x slower torch.exp)
    assert _spincount_after_import(None) == "10000"


@pytest.mark.parametrize("preset", ["0", "300000"])
def test_import_keeps_a_value_set_before(preset):
    assert _spincount_after_import(preset) == preset
