"""simkit.exact.capacity: the linear class's dimension against the rank of the Jacobian of its scores, the
log-d margin against a polynomial fit, the iso-complexity sizes. All deterministic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simkit.exact.capacity import complexity_term, iso_complexity_n, linear_class_dimension, log_factor_slope


def _scores(theta, x, d, p):
    """All pairwise scores phi(x_i).phi(x_j), i < j, of phi_W(x) = W x / |W x| (written here, not simkit's)."""
    h = x @ theta.reshape(d, p).T
    u = h / np.linalg.norm(h, axis=1, keepdims=True)
    s = u @ u.T
    return s[np.triu_indices(x.shape[0], 1)]


def _jacobian_rank(p, d, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((14, p))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    theta = rng.standard_normal(d * p)
    h = 1e-6
    cols = [(_scores(theta + h * e, x, d, p) - _scores(theta - h * e, x, d, p)) / (2 * h) for e in np.eye(d * p)]
    sv = np.linalg.svd(np.array(cols), compute_uv=False)
    return int(np.sum(sv > 1e-6 * sv[0]))


@pytest.mark.deterministic(reason="rank of a generic Jacobian: the singular-value gap is > 1e4 at any random W, x")
@pytest.mark.parametrize("p, d", [(3, 2), (3, 3), (3, 7), (4, 2), (4, 3), (5, 2), (5, 4), (5, 5), (5, 8)])
def test_dimension_is_the_rank_of_the_score_jacobian(p, d):
    # the class's local dimension = rank of d(scores)/dW at a generic W (scale and rotations of W are flat)
    assert linear_class_dimension(p, d) == _jacobian_rank(p, d, seed=10 * p + d)


def test_dimension_closed_forms():
    assert linear_class_dimension(3, 3) == 5 and linear_class_dimension(3, 1024) == 5
    assert [linear_class_dimension(d, d) for d in (4, 8, 16, 32)] == [9, 35, 135, 527]
    assert linear_class_dimension(16, 2) == 30
    # a positive control of the Jacobian check itself: the parameter count d p is not the class dimension
    assert _jacobian_rank(3, 4, seed=1) != 3 * 4
    with pytest.raises(ValueError, match="'d'"):
        linear_class_dimension(3, 1)


def test_log_factor_slope_against_a_polynomial_fit():
    for grid in ([4, 8, 16, 32], [8, 16, 32, 64], [3, 4, 6], [8, 16, 32, 64, 128, 256, 512, 1024]):
        d = np.array(grid, dtype=float)
        ref = np.polyfit(np.log(d), np.log(np.log10(d)), 1)[0]  # natural logs and log10 d: same slope
        assert log_factor_slope(grid) == pytest.approx(ref, rel=1e-12)
    # hand value: log2 d = 2..5, log2 log2 d = 1, log2 3, 2, log2 5 -> slope 0.4380...
    y = np.log2([2, 3, 4, 5])
    assert log_factor_slope([4, 8, 16, 32]) == pytest.approx(np.dot([-1.5, -0.5, 0.5, 1.5], y) / 5, rel=1e-12)
    with pytest.raises(ValueError, match="'levels'"):
        log_factor_slope([1, 2])


def test_iso_complexity_sizes_hold_the_complexity_term():
    p = np.array([9, 35, 135, 527])
    n = iso_complexity_n(p, 8)
    assert n.tolist() == [72, 280, 1080, 4216]
    assert np.allclose(complexity_term(p, n), math.sqrt(1 / 8))
    assert complexity_term(9, 36) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="'ratio'"):
        iso_complexity_n(p, 0)
    with pytest.raises(ValueError, match="'n'"):
        complexity_term(9, 0)
