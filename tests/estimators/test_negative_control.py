"""Negative control: the C1 estimator with m1 or Z2 perturbed by 5% inside its
control variates fails the exact-curve test; the unperturbed estimator passes.

The exact curve (simkit.exact.curve.gap_curve) uses no control variate, so it does not share the
estimator's constants; the c1 z-test does (c1 is built from the same m1 and Z2), which is why a
perturbed constant passes that test and must fail this one.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.exact.curve import gap_curve
from simkit.estimators.infonce import GapEstimator
from simkit.distributions.kernels import VMFKernel
from simkit.distributions.sphere import Uniform
from simkit.stats.truth_tests import curve_test

PI, KERNEL, TAU = Uniform(3), VMFKernel(10.0), 0.1  # the uniform-d3 setting of rate_k
K_MAX, N_BLOCKS, N_ANCHORS = 1024, 32, 256
ALPHA = 1e-3  # the mixture control's rejection level (its miss rate is stated there)
FLOOR = 1e-5  # the level an unperturbed estimator must pass (its false-failure rate)
CONTROL_ALPHA = 1e-2  # the level the perturbed uniform-d3 estimators must be rejected at (a miss rate)


def _blocks(constant_scale, seed):
    est = GapEstimator(PI, KERNEL, TAU, K_MAX, constant_scale=constant_scale)
    rng = np.random.default_rng(seed)
    return np.array([est.block(N_ANCHORS, rng)["gap_cv"] for _ in range(N_BLOCKS)])


@pytest.fixture(scope="module")
def exact_curve():
    return gap_curve(PI, KERNEL, TAU, 1 << np.arange(11)).gap


@pytest.mark.statistical
@pytest.mark.false_fail(FLOOR, reason="Hotelling F(11, 21) p-value > 1e-5 (exact for Gaussian blocks)")
def test_unperturbed_estimator_passes_exact_curve_test(exact_curve):
    """Hotelling T^2 over the 11 k values (F(11, 21)); nominal false-failure rate 1e-5 (exact for
    Gaussian blocks; each block mean averages 256 anchors). Power: a discrepancy of noncentrality
    n delta' Sigma^-1 delta = 87 is detected with probability 1/2, 140 with 0.9 (41 at 1e-3)."""
    res = curve_test(_blocks(None, 20261204), exact_curve)
    assert res.df == (11.0, 21.0)
    assert res.p_value > FLOOR, res


@pytest.mark.statistical
@pytest.mark.parametrize("scale", [
    pytest.param({"m1": 1.05}, marks=pytest.mark.false_fail(
        1e-21, reason="miss probability, non-central F(11, 21) at the pilot noncentrality 498")),
    pytest.param({"Z2": 1.05}, marks=pytest.mark.false_fail(
        2e-5, reason="miss probability at CONTROL_ALPHA = 0.01, non-central F(11, 21) at the pilot noncentrality 124 "
                     "(1.9e-5; 4.3e-4 at 0.8 of it)"))])
def test_perturbed_constant_fails_exact_curve_test(exact_curve, scale):
    """m1 x 1.05 biases gap_cv by +0.05 E[m1/Z]/k (~ +9% of gap_k here), Z2 x 1.05 by
    -0.025 E[Z2/Z^2]/k (~ -5%); both must be rejected at CONTROL_ALPHA = 0.01 (a miss rate, set by the
    power below: at 1e-3 the Z2 miss would be 1.9e-3). Observed during design (seed 99, k_max 1024,
    24 blocks): p ~ 1e-10 (m1) and 1e-7 (Z2).

    False-failure rate = the probability of missing the perturbation, 1 - power of Hotelling's test
    at the noncentrality lambda = n delta' Sigma^-1 delta: from an independent pilot (seed 999001,
    64 blocks; delta from common random numbers, Sigma from the unperturbed blocks, the inverse-Wishart
    bias (n - p - 2)/(n - 1) removed) lambda = 498 (m1) and 124 (Z2), so the misses at 0.01 are 8e-31
    and 1.9e-5 (4.3e-4 at 0.8 lambda)."""
    res = curve_test(_blocks(scale, 20261204), exact_curve)
    assert res.p_value < CONTROL_ALPHA, res


def test_constant_scale_default_is_bit_identical():
    a = GapEstimator(PI, KERNEL, TAU, 64).block(64, np.random.default_rng(1))
    b = GapEstimator(PI, KERNEL, TAU, 64, constant_scale=None).block(64, np.random.default_rng(1))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    with pytest.raises(ValueError, match="'constant_scale' keys"):
        GapEstimator(PI, KERNEL, TAU, 64, constant_scale={"Z": 1.05})
    with pytest.raises(ValueError, match="'constant_scale\\['m1'\\]' must be > 0"):
        GapEstimator(PI, KERNEL, TAU, 64, constant_scale={"m1": -1.0})


@pytest.mark.statistical
@pytest.mark.false_fail(FLOOR + 2e-5, reason="unperturbed p > FLOOR = 1e-5 (conservative F) + the m1 control's miss at ALPHA (non-central F at the pilot noncentrality 124)")
def test_negative_control_mixture_with_estimated_exact_curve():
    """A two-component vMF mixture on S^2 (vMF(5) kernel, tau 0.5): the exact curve is itself Monte
    Carlo over x (gap_curve with 512 anchors, its covariance across k passed as exact_cov; conservative
    F reference). Unperturbed: p > 1e-5 (nominal false-failure <= 1e-5); m1 x 1.05: p < 1e-3
    (observed in design: 1e-30; miss probability 2e-5 at the noncentrality 124 of a pilot, seed
    999002, 64 blocks; 40 of 40 independent re-runs, seeds [555, s] / [556, s], rejected at p <= 1e-5).

    Z2 x 1.05 is reported, not required: its noncentrality here is only ~19, and the 40 re-runs
    rejected it in 9 (22%); the p = 3e-7 at this test's seeds was luck, and asserting it would give the
    test a false-failure rate of ~0.78."""
    from simkit.distributions.kernels import VMFKernel as _V
    from simkit.distributions.sphere import VMFMixture

    mix = VMFMixture([0.6, 0.4], np.eye(3)[:2], [3.0, 5.0])
    kern, tau, k_max = _V(5.0), 0.5, 64
    ex = gap_curve(mix, kern, tau, 1 << np.arange(7), rng=np.random.default_rng(20261206), n_mc=512, n_cv=1 << 16)
    pvals = {}
    for name, cs in (("none", None), ("m1", {"m1": 1.05}), ("Z2", {"Z2": 1.05})):
        est = GapEstimator(mix, kern, tau, k_max, constant_scale=cs)
        rng = np.random.default_rng(20261207)
        blocks = np.array([est.block(256, rng)["gap_cv"] for _ in range(N_BLOCKS)])
        pvals[name] = curve_test(blocks, ex.gap, exact_cov=ex.gap_cov).p_value
    assert pvals["none"] > FLOOR, pvals
    assert pvals["m1"] < ALPHA, pvals  # pvals["Z2"] is shown in the message, not required (see the docstring)
