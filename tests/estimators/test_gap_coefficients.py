"""The control-variate means of a gap block and the estimate under other coefficients
(simkit.estimators.infonce.control_variate_means, gap_with_coefficients).

Expected values: GapEstimator.block itself, run on the same draws with the other coefficients.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from simkit.distributions.kernels import VMFKernel
from simkit.distributions.sphere import Uniform
from simkit.estimators.infonce import GapEstimator, control_variate_means, gap_with_coefficients


@pytest.mark.deterministic(reason="the same draws re-weighted: agreement to rounding (1e-9 relative)")
def test_reweighted_block_equals_a_direct_block():
    est = GapEstimator(Uniform(3), VMFKernel(10.0), 0.1, 1 << 8)
    coef = est.calibrate(64, np.random.default_rng(1), n_blocks=1)
    rng = np.random.default_rng(7)
    start = copy.deepcopy(rng)
    res = est.block(64, rng, coef)
    means = control_variate_means(est, 64, start, coef, res)
    assert np.array_equal(gap_with_coefficients(res["gap_plain"], means, coef), res["gap_plain"] - coef[:, 0] * means[0]
                          - coef[:, 1] * means[1] - coef[:, 2] * means[2])
    np.testing.assert_allclose(gap_with_coefficients(res["gap_plain"], means, coef), res["gap_cv"], rtol=1e-9,
                               atol=1e-13)
    for other in (est.default_coef(), 0.5 * coef):
        ref = est.block(64, copy.deepcopy(start), other)["gap_cv"]
        np.testing.assert_allclose(gap_with_coefficients(res["gap_plain"], means, other), ref, rtol=1e-9, atol=1e-13)
    # positive control: the means of another block's draws do not reproduce this block
    wrong = control_variate_means(est, 64, np.random.default_rng(8), coef, res)
    assert not np.allclose(gap_with_coefficients(res["gap_plain"], wrong, est.default_coef()),
                           est.block(64, copy.deepcopy(start), est.default_coef())["gap_cv"], rtol=1e-6)
