"""The two routes to a bound on E[G] (simkit.exact.bounds.bound_averaging, bound_max; docs/theory.md section 18).

Expected values come from the formulas written again here and minimised by brute force (a dense log grid
of a million scales, then scipy's bounded scalar minimiser), not from simkit's own minimiser; the
Lipschitz premises of the two routes are checked on random score vectors.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import optimize

from simkit.exact.bounds import bound_averaging, bound_max, linear_class_constants, theorem1_bound

CLASS = linear_class_constants(3, 0.2)  # P = 9, rho = sqrt(3), L_phi = 10


def _brute(lin: float, rng_: float, n: int) -> float:
    """inf over eps of lin * eps + rng_ * sqrt(2 P log(1 + 4 rho / eps) / n), by grid then scipy."""
    p, rho = CLASS["n_params"], CLASS["radius"]
    f = lambda u: lin * np.exp(u) + rng_ * np.sqrt(2 * p * np.log1p(4 * rho * np.exp(-u)) / n)  # noqa: E731
    u = np.linspace(math.log(1e-14), math.log(10 * rho), 1_000_001)
    v = f(u)
    i = int(np.argmin(v))
    res = optimize.minimize_scalar(f, bounds=(u[max(i - 2, 0)], u[min(i + 2, u.size - 1)]), method="bounded",
                                   options={"xatol": 1e-12})
    return float(min(v[i], res.fun))


@pytest.mark.parametrize("n, tau", [(64, 0.1), (1024, 0.5), (16384, 1.0)])
def test_bound_averaging_brute_force(n, tau):
    lphi = CLASS["phi_lipschitz"]
    want = 2 * _brute(4 * lphi / tau, 4 / tau, n)
    got = bound_averaging(n, tau, **CLASS)
    assert got == pytest.approx(want, rel=1e-7)
    # where it is below the trivial bound D it is theorem1_bound's complexity term
    if want / 2 < 4 / tau:
        assert got == pytest.approx(theorem1_bound(n, 1, tau, **CLASS).complexity, rel=1e-12)


@pytest.mark.parametrize("n, k, tau", [(64, 1, 0.1), (1024, 16, 0.5), (4096, 4096, 0.1), (16384, 777, 1.0)])
def test_bound_max_brute_force(n, k, tau):
    lphi = CLASS["phi_lipschitz"]
    want = 2 * math.sqrt(2) * _brute(k * 4 * lphi / tau, math.sqrt(k) * 2 / tau, n)
    assert bound_max(n, k, tau, **CLASS) == pytest.approx(want, rel=1e-7)


def test_growth_in_k():
    """bound_averaging has no k; bound_max grows at least like sqrt(k) per doubling (the log factor adds)."""
    ks = 2 ** np.arange(0, 13)
    b = np.array([bound_max(4096, int(k), 0.1, **CLASS) for k in ks])
    ratio = b[1:] / b[:-1]
    assert np.all(ratio >= math.sqrt(2) * (1 - 1e-9)) and np.all(ratio <= 1.6)


def test_lipschitz_premises():
    """G(r) = log(1 + sum e^{r_j}) is 1-Lipschitz in the max norm (gradient: a sub-probability vector, the
    averaging route) and hence in the Euclidean norm (the contraction route), on random and extreme pairs."""
    rng = np.random.default_rng(7)
    for k in (1, 2, 16, 1024):
        r = rng.normal(0.0, 20.0, (200, k))
        r2 = r + rng.normal(0.0, rng.choice([0.01, 1.0, 30.0]), (200, k))
        g = np.logaddexp(0.0, np.logaddexp.reduce(r, axis=1))
        g2 = np.logaddexp(0.0, np.logaddexp.reduce(r2, axis=1))
        d = np.abs(g2 - g)
        assert np.all(d <= np.max(np.abs(r2 - r), axis=1) * (1 + 1e-12) + 1e-12)
        assert np.all(d <= np.linalg.norm(r2 - r, axis=1) * (1 + 1e-12) + 1e-12)


@pytest.mark.parametrize("bad", [dict(n=0), dict(tau=0.0), dict(k=0)])
def test_bad_input(bad):
    args = dict(n=100, k=4, tau=0.1)
    args.update(bad)
    with pytest.raises(ValueError, match=next(iter(bad))):
        bound_max(args["n"], args["k"], args["tau"], **CLASS)
