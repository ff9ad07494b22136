"""Exact non-reversibility moments (simkit.exact.moments) against closed forms written here.

A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa) (scipy's Bessel functions) is the mean cosine of a vMF
law. Uniform pi: E[x x^T] = I/d, E x = 0, so for M(x, .) = vMF(R x, kappa) with R a rotation by
theta in the (e_1, e_2) plane, E[x_1 x+_2 - x_2 x+_1] = (A/d)(R_21 - R_12) = 2 A sin(theta)/d and
the mean shift is 0. A vMF pi with mean e_1 under the Brownian kernel: B = e^{-(d-1)t/2} I is
symmetric, so the cross term is 0, and the shift is (e^{-(d-1)t/2} - 1) A_d(kappa_pi).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import ive

from simkit import RotatedVMFKernel, Uniform, VMFKernel, VonMisesFisher
from simkit.distributions.heat import BrownianKernel
from simkit.exact.moments import asymmetry_exact, mean_map


def _a(d, kappa):
    return ive(d / 2, kappa) / ive(d / 2 - 1, kappa)


@pytest.mark.parametrize("d,angle,kappa", [(3, 2.6, 10.0), (8, math.pi / 3, 5.0)])
def test_rotated_kernel_over_uniform(d, angle, kappa):
    kernel = RotatedVMFKernel.plane_rotation(d, angle, kappa)
    cross, shift = asymmetry_exact(Uniform(d), kernel)
    r = kernel.rotation
    assert cross == pytest.approx(_a(d, kappa) * (r[1, 0] - r[0, 1]) / d, rel=1e-10)
    assert abs(cross) == pytest.approx(2 * _a(d, kappa) * abs(math.sin(angle)) / d, rel=1e-10)
    assert shift == pytest.approx(0.0, abs=1e-15)
    np.testing.assert_allclose(mean_map(kernel, d), _a(d, kappa) * r, rtol=1e-12)


@pytest.mark.parametrize("d,t,kappa_pi", [(3, 0.2, 2.0), (8, 0.05, 4.0)])
def test_brownian_kernel_over_vmf(d, t, kappa_pi):
    mu = np.eye(d)[0]
    cross, shift = asymmetry_exact(VonMisesFisher(mu, kappa_pi), BrownianKernel(t))
    assert cross == pytest.approx(0.0, abs=1e-15)
    assert shift == pytest.approx((math.exp(-(d - 1) * t / 2) - 1) * _a(d, kappa_pi), rel=1e-10)


def test_reversible_control_is_zero():
    """Positive control of the statistics' meaning: the reversible vMF kernel over uniform pi gives 0 and 0,
    while the same kernel rotated does not."""
    cross, shift = asymmetry_exact(Uniform(3), VMFKernel(10.0))
    assert cross == 0.0 and shift == 0.0
    assert abs(asymmetry_exact(Uniform(3), RotatedVMFKernel.plane_rotation(3, 0.5, 10.0))[0]) > 0.1
