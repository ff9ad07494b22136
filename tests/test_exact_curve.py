"""Tests of simkit.exact_curve against independent truths: brute-force enumeration, mpmath sums
over binomial laws, closed forms (simkit.exact.gap_exact), and brute-force Monte Carlo."""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

import simkit.exact_curve as ec
from simkit.exact_curve import expected_log_sum, expected_log_sum_parts


# ----------------------------------------------------------------------------------------------
# expected_log_sum: brute force and mpmath

def _brute_force(ps, pw, ns, nw, k):
    """E log(e^{S0} + sum_{i<=k} e^{S_i}) by enumerating every (S0, S_1..S_k) combination."""
    terms = []
    for p in range(len(ps)):
        for combo in itertools.product(range(len(ns)), repeat=k):
            wt = pw[p] * math.prod(nw[c] for c in combo)
            terms.append(wt * math.log(math.exp(ps[p]) + math.fsum(math.exp(ns[c]) for c in combo)))
    return math.fsum(terms)


def test_expected_log_sum_brute_force_small_k():
    rng = np.random.default_rng(20261201)
    n_a, n_p, n_n = 3, 3, 4
    ps = rng.normal(size=(n_a, n_p)) * 4.0
    pw = rng.dirichlet(np.ones(n_p), size=n_a)
    ns = rng.normal(size=(n_a, n_n)) * 4.0
    nw = rng.dirichlet(np.ones(n_n), size=n_a)
    pw[0, 1] = 0.0  # a zero-weight atom is ignored
    pw[0] /= pw[0].sum()
    ks = [1, 2, 3]
    out = expected_log_sum(ps, pw, ns, nw, ks)
    assert out.shape == (n_a, 3)
    for a in range(n_a):
        for j, k in enumerate(ks):
            bf = _brute_force(ps[a], pw[a], ns[a], nw[a], k)
            assert abs(out[a, j] - bf) <= 1e-13 * abs(bf)


def test_expected_log_sum_broadcast_weights():
    rng = np.random.default_rng(5)
    ps = rng.normal(size=(2, 2))
    ns = rng.normal(size=(2, 3))
    nw = np.array([0.2, 0.5, 0.3])
    a = expected_log_sum(ps, [0.5, 0.5], ns, nw, [1, 2])
    b = expected_log_sum(ps, np.full((2, 2), 0.5), ns, np.tile(nw, (2, 1)), [1, 2])
    np.testing.assert_array_equal(a, b)
    assert abs(a[1, 1] - _brute_force(ps[1], [0.5, 0.5], ns[1], nw, 2)) < 1e-13 * abs(a[1, 1])


def _mp_binomial_centred(k, s0, w0, sn, p, dps=30):
    """E log(Y_k / E Y_k) by mpmath for a two-atom negative law (S = sn[1] w.p. p): sum over
    j ~ Binomial(k, p), truncated at 45 standard deviations (pmf < 1e-400 beyond)."""
    with mp.workdps(dps):
        e = [mp.e ** mp.mpf(s) for s in s0]
        q = [mp.mpf(x) for x in w0]
        pp = mp.mpf(p)
        lo_v, hi_v = (mp.e ** mp.mpf(s) for s in sn)
        mu = sum(qq * ee for qq, ee in zip(q, e)) + k * ((1 - pp) * lo_v + pp * hi_v)
        sd = math.sqrt(k * p * (1 - p))
        lo = max(0, int(k * p - 45 * sd) - 1)
        hi = min(k, int(k * p + 45 * sd) + 1)
        pj = mp.e ** (mp.loggamma(k + 1) - mp.loggamma(lo + 1) - mp.loggamma(k - lo + 1)
                      + lo * mp.log(pp) + (k - lo) * mp.log(1 - pp))
        r = pp / (1 - pp)
        tot = mp.mpf(0)
        for j in range(lo, hi + 1):
            for ee, qq in zip(e, q):
                tot += qq * pj * mp.log((ee + j * hi_v + (k - j) * lo_v) / mu)
            pj *= (k - j) * r / (j + 1)
        return float(tot), float(mp.log(mu))


CASES = [
    # (positive scores, weights, negative scores, P(high negative)): moderate and wide (2/tau = 20) ranges
    ([0.3, 2.0], [0.6, 0.4], [-1.0, 1.5], 0.3),
    ([-10.0, 10.0], [0.5, 0.5], [-10.0, 10.0], 0.01),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("k", [1, 7, 1000, 1 << 14])
def test_expected_log_sum_mpmath(case, k):
    s0, w0, sn, p = CASES[case]
    truth, log_mu = _mp_binomial_centred(k, s0, w0, sn, p)
    lm, cen = expected_log_sum_parts([s0], [w0], [sn], [[1 - p, p]], [k])
    assert abs(cen[0, 0] - truth) <= 1e-12 * abs(truth)  # the O(1/k) centred part, relative
    assert abs(lm[0, 0] - log_mu) <= 1e-14 * abs(log_mu)
    full = expected_log_sum([s0], [w0], [sn], [[1 - p, p]], [k])[0, 0]
    # the sum of the two parts can cancel (here 9.33 - 8.88): accuracy relative to the parts
    assert abs(full - (truth + log_mu)) <= 1e-14 * (abs(truth) + abs(log_mu))


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(CASES)))
def test_expected_log_sum_mpmath_k_2_20(case):
    k = 1 << 20
    s0, w0, sn, p = CASES[case]
    truth, _ = _mp_binomial_centred(k, s0, w0, sn, p)
    _, cen = expected_log_sum_parts([s0], [w0], [sn], [[1 - p, p]], [k])
    assert abs(cen[0, 0] - truth) <= 1e-10 * abs(truth)


def test_expected_log_sum_step_halving(monkeypatch):
    """Self-consistency of the trapezoidal rule on many-atom laws with a 20-wide score range:
    halving the step changes the centred part by < 1e-12 relative for k = 1 .. 2^20."""
    rng = np.random.default_rng(11)
    ps = rng.uniform(-10, 10, size=(2, 30))
    ns = rng.uniform(-10, 10, size=(2, 200))
    pw = rng.dirichlet(np.ones(30), size=2)
    nw = rng.dirichlet(np.ones(200), size=2)
    ks = 1 << np.arange(21)
    _, a = expected_log_sum_parts(ps, pw, ns, nw, ks)
    monkeypatch.setattr(ec, "TRAPEZOID_STEP", ec.TRAPEZOID_STEP / 2)
    _, b = expected_log_sum_parts(ps, pw, ns, nw, ks)
    assert np.all(np.abs(a - b) <= 1e-12 * np.abs(b))


@pytest.mark.parametrize("bad, match", [
    (dict(pos_scores=[[np.nan, 1.0]]), "'pos_scores' must be finite"),
    (dict(pos_weights=[[0.5, 0.6]]), "'pos_weights' rows must sum to 1"),
    (dict(neg_weights=[[-0.5, 1.5]]), "'neg_weights' must be finite and >= 0"),
    (dict(neg_scores=[[0.0, 1.0], [0.0, 1.0]]), "'neg_scores' must have 1 rows"),
    (dict(ks=[0, 1]), "'ks' must be"),
    (dict(ks=[1.5]), "'ks' must be"),
    (dict(neg_scores=[[0.0, 800.0]]), "must span less than"),
])
def test_expected_log_sum_errors(bad, match):
    args = dict(pos_scores=[[0.0, 1.0]], pos_weights=[[0.5, 0.5]], neg_scores=[[0.0, 1.0]],
                neg_weights=[[0.5, 0.5]], ks=[1])
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        expected_log_sum(**args)
