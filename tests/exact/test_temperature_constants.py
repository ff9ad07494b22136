"""The exact constants of claim C5 (simkit.exact.divergence.temperature_constants) and the per-anchor KL
estimates (simkit.distributions.softmax_kernel.kl_estimates).

For uniform pi at tau = 1/kappa_M the identity's softmax kernel Q is M itself, so CE(M, Q) = H = -E KL(M || pi)
(docs/theory.md section 2): two separate exact computations must agree, and E_x KL(Q || pi) = -H; for another pi,
H is a strict lower bound of CE. KL(Q || pi) <= 2/tau holds at
every anchor. kl_estimates draws the anchors first, so its closed form is kl_q_pi at the first draws of rng.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit import Uniform, VonMisesFisher
from simkit.distributions.softmax_kernel import kl_estimates, kl_q_pi
from simkit.exact.divergence import temperature_constants


@pytest.mark.parametrize("pi", [Uniform(3), VonMisesFisher(np.eye(8)[0], 2.0)])
@pytest.mark.deterministic(reason="exact quadrature and closed forms for these pi (MCSE 0, asserted); rtol 1e-6")
def test_matched_temperature_identities(pi):
    c = temperature_constants(pi, 10.0, 0.1, np.array([1, 2, 4]), n_mc=1024, rng=np.random.default_rng(0))
    ce, h, klm = (float(c[n][0]) for n in ("ce", "entropy", "kl_mean"))
    if isinstance(pi, Uniform):
        assert ce == pytest.approx(h, rel=1e-6) and klm == pytest.approx(-h, rel=1e-6)
    else:
        assert ce > h + 0.01
    assert all(float(c[n][1]) == 0.0 for n in ("ce", "entropy", "kl_mean", "c1"))  # exact, no Monte Carlo
    assert 0 < float(c["kl_sup"]) <= 2 / 0.1 and float(c["rho"]) >= 1.0
    assert np.all(np.isfinite(c["gap_exact"])) == isinstance(pi, Uniform)  # exact gap for uniform pi only


@pytest.mark.deterministic(reason="the closed form at the anchors and the bound 2/tau are exact; no tolerance on noise")
def test_kl_estimates_anchors_and_bound():
    pi, tau = VonMisesFisher(np.eye(3)[0], 3.0), 0.2
    out = kl_estimates(pi, tau, 5, 64, rng=np.random.default_rng(1))
    x = pi.rvs(5, rng=np.random.default_rng(1))
    np.testing.assert_allclose(out["kl_exact"], kl_q_pi(pi, x, tau), rtol=1e-12)
    assert all(out[n].shape == (5,) for n in out) and np.all(out["kl_exact"] <= 2 / tau)
    assert np.all(out["kl_q_mcse"] > 0) and np.all((out["kl_is_ess"] > 0) & (out["kl_is_ess"] <= 64))
