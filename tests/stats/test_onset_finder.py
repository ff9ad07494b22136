"""Tests of simkit.stats.onset against independent truth: synthetic curves whose onset is known in
closed form (gap = c1/k + c2/k^2 has |k gap/c1 - 1| = |c2/c1|/k, onset at k >= |c2/c1|/tol), a
brute-force scan written here, and the Monte Carlo interval against its error-free limit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simkit.stats.onset import interval_position, onset_interval, onset_k, onset_ratio

KS = 2.0 ** np.arange(0, 24.5, 0.5)


def _brute_onset(ks, ratio, tol):
    """Independent scan: for each candidate from the left, check every later point."""
    for i in range(len(ks)):
        if all(abs(r - 1.0) <= tol for r in ratio[i:]):  # NaN fails the comparison
            return ks[i]
    return math.inf


@pytest.mark.parametrize("c1,c2", [(5.5, -2.3), (-2088.0, 9.3e6), (25.5, 44.36), (-41.2, 8322.0)])
def test_first_order_onset_is_the_closed_form(c1, c2):
    gap = c1 / KS + c2 / KS**2
    expected = KS[np.argmax(KS >= abs(c2 / c1) / 0.1 * (1 - 1e-12))]  # smallest grid k with |c2/c1|/k <= 0.1
    assert onset_k(KS, onset_ratio(KS, gap, c1), 0.1) == expected


def test_second_order_onset_matches_brute_force():
    c1, c2, c3 = -41.2, 8322.0, -3.0e6
    gap = c1 / KS + c2 / KS**2 + c3 / KS**3
    ratio = gap / (c1 / KS + c2 / KS**2)
    got = onset_k(KS, onset_ratio(KS, gap, c1, c2), 0.1)
    assert got == _brute_onset(KS, ratio, 0.1)
    # the two predictions cross zero at k = -c2/c1 ~ 202 (the second-order ratio is huge nearby)
    assert got > 202.0


def test_last_exit_not_first_entry():
    """Positive control for the definition: a curve that enters the band, leaves it and re-enters;
    a finder returning the first entry (k = 4) would fail."""
    r = np.ones(KS.size)
    r[:8] = 2.0  # k < 16 outside
    r[20:24] = 1.3  # k in [1024, 2896] outside again
    assert onset_k(KS, r, 0.1) == KS[24] == 4096.0
    assert onset_k(KS, r, 0.1) == _brute_onset(KS, r, 0.1)


def test_no_onset_and_nan():
    r = np.ones(KS.size)
    r[-1] = 1.2
    assert onset_k(KS, r, 0.1) == math.inf
    r = np.ones(KS.size)
    r[30] = np.nan  # an undefined ratio is outside
    assert onset_k(KS, r, 0.1) == KS[31]
    assert onset_k(KS, np.ones(KS.size), 0.1) == 1.0
    # a zero prediction gives NaN, not inf
    assert np.isnan(onset_ratio([1.0, 2.0], [1.0, 1.0], 2.0, -2.0)[0])


def test_interval_without_error_is_the_point():
    c1, c2 = 25.5, 44.36
    gap = c1 / KS + c2 / KS**2
    k0 = onset_k(KS, onset_ratio(KS, gap, c1))
    assert onset_interval(KS, gap, c1) == (k0, k0)
    assert onset_interval(KS, gap, c1, gap_cov=np.zeros((KS.size, KS.size))) == (k0, k0)


@pytest.mark.deterministic("fixed seed; tiny noise (1e-9 relative) cannot move a ratio 1e-3 from the band edge, "
                           "c1's MCSE of 3% moves the onset by up to ~2.5x")
def test_interval_brackets_and_widens():
    c1, c2 = -2088.0, 9.3e6  # onset where |c2/c1|/k <= 0.1: k >= 44540, grid 46341
    gap = c1 / KS + c2 / KS**2
    k0 = onset_k(KS, onset_ratio(KS, gap, c1))
    tiny = np.diag((1e-9 * np.abs(gap)) ** 2)
    assert onset_interval(KS, gap, c1, gap_cov=tiny, rng=1, n_draws=200) == (k0, k0)
    lo, hi = onset_interval(KS, gap, c1, c1_mcse=0.03 * abs(c1), rng=2, n_draws=400)
    assert lo < k0 < hi
    # c1 off by 2 sd (6%) leaves |c2/c1|/k <= 0.04 of the band: k up to 2.5x the point (next grid point 4x)
    assert hi <= 4.0 * k0
    with pytest.raises(ValueError, match="'rng' is required"):
        onset_interval(KS, gap, c1, c1_mcse=1.0)


def test_interval_position():
    assert interval_position(2.0, 8.0, 1.0, 16.0) == "inside"
    assert interval_position(20.0, 40.0, 1.0, 16.0) == "outside"
    assert interval_position(math.inf, math.inf, 1.0, 16.0) == "outside"
    assert interval_position(0.5, 4.0, 1.0, 16.0) == "undetermined"
    assert interval_position(math.nan, 4.0, 1.0, 16.0) == "undetermined"


def test_bad_input():
    with pytest.raises(ValueError, match="'ks' must be"):
        onset_k([2.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="'ratio' must have"):
        onset_k([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="'tol'"):
        onset_k([1.0, 2.0], [1.0, 1.0], tol=0.0)
