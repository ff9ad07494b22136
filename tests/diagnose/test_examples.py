"""The worked examples in examples/ run end to end (each in a fresh process, under ~20 s)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, tmp_path: Path) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_digits_pca_example(tmp_path):
    out = _run("digits_pca.py", "--report", "pca.pdf", tmp_path=tmp_path)
    k = re.search(r"\|bias\| <= 0.01 nats: k = (\d+) \(95% interval", out)
    assert k and 1 < int(k.group(1)) < 10**6, out
    assert "k = 254" in out and "NT-Xent" in out
    assert (tmp_path / "pca.pdf").read_bytes()[:5] == b"%PDF-"


def test_digits_torch_mlp_example(tmp_path):
    pytest.importorskip("torch")
    out = _run("digits_torch_mlp.py", tmp_path=tmp_path)
    assert re.search(r"\|bias\| <= 0.01 nats: k = \d+ \(95% interval", out), out
    assert "k = B - 1" in out
