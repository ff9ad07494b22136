"""``simkit diagnose --batch-size B --scheme S``: the in-batch constant of the finite set (docs/theory.md §16)
against simkit.exact.in_batch.finite_constants and against a brute-force enumeration of the pairs."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import simkit
from simkit.exact.in_batch import finite_constants


def _data(n=14, d=4, seed=3):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 4
    x = rng.normal(size=(n, d)) + np.eye(d)[y] * 1.5
    return x / np.linalg.norm(x, axis=1, keepdims=True), y


_KW = dict(tau=0.4, k_max=256, n_tuples=256, n_blocks=4)


@pytest.mark.deterministic(reason="every row is an anchor (census): exact values, tolerance float rounding")
@pytest.mark.parametrize("scheme", ["ntxent", "clip"])
def test_include_anchor_equals_finite_constants(scheme):
    """Under include-anchor, π is uniform over all rows and M(a, ·) uniform over a's label (itself included):
    exactly the finite π of finite_constants."""
    x, y = _data()
    dg = simkit.diagnose(x, labels=y, batch_size=9, scheme=scheme, convention="include_anchor", **_KW)
    m = (y[:, None] == y[None, :]).astype(float)
    m /= m.sum(axis=1, keepdims=True)
    ref = finite_constants(x @ x.T / 0.4, np.full(len(y), 1 / len(y)), m, scheme)
    assert dg.batch["c1"] == pytest.approx(ref.c1, abs=1e-11)
    assert dg.batch["limit"] == pytest.approx(ref.limit, abs=1e-11)
    assert dg.k == (16 if scheme == "ntxent" else 8)
    # positive control: the i.i.d. constant, which the batch answer replaces, is not it
    assert abs(dg.c1 - ref.c1) > 1e-3 or scheme == "clip"


def _brute(x, pos, tau, scheme):
    """Enumerate the pairs (y, y') of every anchor a: y uniform over the rows other than a, y' uniform over
    y's listed positives other than y; c1 = r (mu1/r - w2/2) of §16.1 with the unit's law written out."""
    n = x.shape[0]
    c1s, lims = [], []
    for a in range(n):
        s = x[a] @ x.T / tau
        units, probs = [], []
        others = [b for b in range(n) if b != a]
        for b in others:
            pb = [p for p in pos[b] if p != b]
            for p in pb:
                units.append(np.exp(s[b]) + np.exp(s[p]) if scheme == "ntxent" else np.exp(s[p]))
                probs.append(1.0 / len(others) / len(pb))
        units, probs = np.array(units), np.array(probs)
        r = 2 if scheme == "ntxent" else 1
        zeta = probs @ units / r
        w2 = probs @ (units / (r * zeta) - 1.0) ** 2
        pa = [p for p in pos[a] if p != a]
        mu1 = np.mean(np.exp(s[pa])) / zeta
        c1s.append(r * (mu1 / r - w2 / 2))
        lims.append(np.log(zeta) - np.mean(s[pa]))
    return np.mean(c1s), np.mean(lims)


@pytest.mark.deterministic(reason="census of anchors: exact values, tolerance float rounding")
@pytest.mark.parametrize("scheme", ["ntxent", "clip"])
def test_exclude_anchor_positives_against_brute_force(scheme):
    x, _ = _data(n=11)
    pos = np.array([[(i + 1) % 11, (i + 3) % 11, i] for i in range(11)])  # one self-entry, dropped
    dg = simkit.diagnose(x, positives=pos, batch_size=5, scheme=scheme, **_KW)
    c1, lim = _brute(x, pos, 0.4, scheme)
    assert dg.batch["c1"] == pytest.approx(c1, abs=1e-11)
    assert dg.batch["limit"] == pytest.approx(lim, abs=1e-11)
    ds = dg.to_xarray()
    assert float(ds["c1_batch"]) == pytest.approx(c1, abs=1e-11)
    k = 8 if scheme == "ntxent" else 4
    assert float(ds["bias_batch"]) == pytest.approx(c1 / k, abs=1e-12)
    need = int(ds["batch_needed"])
    kk = (lambda b: 2 * b - 2) if scheme == "ntxent" else (lambda b: b - 1)
    assert abs(c1) / kk(need) <= dg.eps and (need == 2 or abs(c1) / kk(need - 1) > dg.eps)


@pytest.mark.deterministic(reason="fixed data; exact values, the wrong scheme differs by > 1e-3")
def test_positive_control_schemes_differ():
    x, y = _data()
    a = simkit.diagnose(x, labels=y, batch_size=9, scheme="ntxent", **_KW).batch
    b = simkit.diagnose(x, labels=y, batch_size=9, scheme="clip", **_KW).batch
    assert abs(a["c1"] - b["c1"]) > 1e-3


@pytest.mark.parametrize("kwargs, message", [
    (dict(scheme="moco", batch_size=4), "'scheme' must be one of ntxent, clip"),
    (dict(scheme="clip"), "'scheme' applies to 'batch_size' only"),
    (dict(scheme="clip", batch_size=4, symmetric=True), "'symmetric' is NT-Xent"),
])
def test_bad_scheme(kwargs, message):
    x, y = _data()
    with pytest.raises(ValueError, match=message):
        simkit.diagnose(x, labels=y, tau=0.4, **kwargs)


def test_cli_scheme(tmp_path):
    x, y = _data()
    f = tmp_path / "e.npz"
    np.savez(f, embeddings=x, labels=y)
    run = lambda *a: subprocess.run([sys.executable, "-m", "simkit", "diagnose", str(f), "--tau", "0.4",  # noqa: E731
                                     "--k-max", "256", "--n-tuples", "256", *a], capture_output=True, text=True)
    ok = run("--batch-size", "9", "--scheme", "ntxent")
    assert ok.returncode == 0, ok.stderr
    assert "in-batch (NT-Xent" in ok.stdout and "k = 16" in ok.stdout
    bad = run("--batch-size", "9", "--scheme", "moco", "--out", str(tmp_path / "o.nc"))
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "--scheme" in bad.stderr or "'scheme'" in bad.stderr
    assert not (tmp_path / "o.nc").exists()
