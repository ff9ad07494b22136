"""simkit.estimators.prefix.prefix_losses against a direct loop over tuples and k (float64 and mpmath)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from simkit.estimators.prefix import prefix_losses


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


@pytest.mark.parametrize("tau", [1.0, 0.1, 0.005])
def test_against_direct_loop(tau):
    rng = np.random.default_rng(3)
    u, v, w = _unit(rng.normal(size=(5, 3))), _unit(rng.normal(size=(5, 3))), _unit(rng.normal(size=(5, 40, 3)))
    ks = [1, 2, 7, 40]
    got = prefix_losses(u, v, w, tau, ks)
    for i in range(5):
        s0 = mpmath.mpf(float(u[i] @ v[i])) / tau
        for g, k in enumerate(ks):
            terms = [mpmath.exp(s0)] + [mpmath.exp(mpmath.mpf(float(u[i] @ w[i, j])) / tau) for j in range(k)]
            want = float(-s0 + mpmath.log(mpmath.fsum(terms)))
            assert got[i, g] == pytest.approx(want, rel=1e-12, abs=1e-12)


def test_bad_input():
    u = np.eye(3)[:2]
    with pytest.raises(ValueError, match="'ks'"):
        prefix_losses(u, u, np.ones((2, 4, 3)) / np.sqrt(3), 0.1, [5])
    with pytest.raises(ValueError, match="'tau'"):
        prefix_losses(u, u, np.ones((2, 4, 3)) / np.sqrt(3), 0.0, [1])
