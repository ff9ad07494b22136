"""Per-anchor terms of simkit.exact.in_batch (finite_anchor_terms, sphere_anchor_terms) against brute force
and the d = 3 closed forms of docs/theory.md §16.3 (evaluated with mpmath)."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from simkit.exact.in_batch import finite_anchor_terms, sphere_anchor_terms


@pytest.mark.deterministic(reason="exact sums on fixed inputs; tolerance is float rounding")
@pytest.mark.parametrize("scheme", ["iid", "ntxent", "clip"])
def test_finite_terms_against_enumeration(scheme):
    rng = np.random.default_rng(4)
    n = 6
    s = rng.normal(size=(n, n))
    w = rng.random(n) + 0.1
    w /= w.sum()
    m = rng.random((n, n)) ** 3
    m /= m.sum(axis=1, keepdims=True)
    got = finite_anchor_terms(s, w, m, scheme)
    for a in range(n):
        units, probs = [], []
        for b in range(n):
            if scheme == "iid":
                units.append(np.exp(s[a, b])), probs.append(w[b])
            elif scheme == "clip":
                units.append(np.exp(s[a, b])), probs.append(w @ m[:, b])
            else:
                for c in range(n):
                    units.append(np.exp(s[a, b]) + np.exp(s[a, c])), probs.append(w[b] * m[b, c])
        units, probs = np.array(units), np.array(probs)
        r = 2 if scheme == "ntxent" else 1
        zeta = probs @ units / r
        assert got["log_zeta"][a] == pytest.approx(np.log(zeta), abs=1e-13)
        assert got["w2"][a] == pytest.approx(probs @ (units / (r * zeta) - 1) ** 2, abs=1e-13)
        assert got["log_m1"][a] == pytest.approx(np.log(m[a] @ np.exp(s[a])), abs=1e-13)
        assert got["mean_s"][a] == pytest.approx(m[a] @ s[a], abs=1e-13)


@pytest.mark.deterministic(reason="closed forms and mpmath quadrature; tolerance is quadrature accuracy")
@pytest.mark.parametrize("kappa, tau", [(5.0, 0.5), (10.0, 0.1)])
def test_sphere_terms_d3_closed_forms(kappa, tau):
    mp.mp.dps = 30
    a, k = mp.mpf(1) / tau, mp.mpf(kappa)
    z, z2 = mp.sinh(a) / a, mp.sinh(2 * a) / (2 * a)
    m1 = k * mp.sinh(k + a) / ((k + a) * mp.sinh(k))
    j11 = mp.quad(lambda r: mp.exp((r * r - k * k - a * a) / (2 * k)) * mp.sinh(r), [abs(k - a), k + a]) \
        / (2 * a * mp.sinh(k))
    iid = sphere_anchor_terms(3, kappa, tau, "iid")
    nt = sphere_anchor_terms(3, kappa, tau, "ntxent")
    assert iid["log_zeta"] == pytest.approx(float(mp.log(z)), rel=1e-12)
    assert iid["log_m1"] == pytest.approx(float(mp.log(m1)), rel=1e-12)
    assert iid["mean_s"] == pytest.approx(float(a * (mp.coth(k) - 1 / k)), rel=1e-12)
    assert iid["w2"] == pytest.approx(float(z2 / z ** 2 - 1), rel=1e-12)
    assert nt["w2"] == pytest.approx(float((z2 / z ** 2 + j11 / z ** 2) / 2 - 1), rel=1e-9)
    assert sphere_anchor_terms(3, kappa, tau, "clip") == iid
