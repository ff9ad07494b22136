"""The Theorem-1-type bound (simkit.exact.bounds) against values computed by hand, the linear class's
Lipschitz constant on random members of the class, the positive control's temperature, and the
point-by-point comparison of upper limits with a bound. All deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.exact.bounds import (compare_to_bound, control_tau, linear_class_bound, linear_class_constants,
                                 net_bound, rademacher_bound, theorem1_bound)


def test_bound_hand_computed_values():
    """simkit.exact.bounds against values computed by hand."""
    # net bound at one scale: 0.25 + sqrt(2 ln 17 / 100) = 0.25 + sqrt(0.0566642669) = 0.25 + 0.2380425737
    assert net_bound(0.25, 100, 1, 1.0, 1.0, 1.0) == pytest.approx(0.4880425737, abs=1e-10)
    # theorem1_bound, tau = 0.5: L_loss = 4 * 1 / 0.5 = 8, D = 4 / 0.5 = 8; variability 8 sqrt(ln 20 / 400) =
    # 0.692327..., plug-in 1/k term |c1| / k = 0.2; with n = 1 the net bound exceeds D, so the complexity term
    # is 2 D = 16
    b = theorem1_bound(1, 10, 0.5, n_params=9, radius=1.0, phi_lipschitz=1.0, eta=0.05, c1=-2.0)
    assert (b.loss_lipschitz, b.loss_range, b.complexity, b.bias) == (8.0, 8.0, 16.0, pytest.approx(0.2))
    assert np.isnan(b.eps)
    b = theorem1_bound(200, 10, 0.5, n_params=1, radius=1.0, phi_lipschitz=1.0, eta=0.05, c1=2.0)
    assert b.variability == pytest.approx(8 * np.sqrt(np.log(20) / 400), rel=1e-14)
    assert b.variability == pytest.approx(0.6923273530, abs=1e-10)
    assert b.high_probability == b.complexity + b.variability and b.total == pytest.approx(b.high_probability + 0.2)
    # the complexity term is twice the infimum of the net bound (dense grid), attained at eps
    grid = np.exp(np.linspace(np.log(1e-6), np.log(4.0), 200001))
    best = net_bound(grid, 200, 1, 1.0, 8.0, 8.0).min()
    assert b.complexity / 2 == pytest.approx(best, rel=1e-8) and b.complexity / 2 <= best
    assert net_bound(b.eps, 200, 1, 1.0, 8.0, 8.0) == pytest.approx(b.complexity / 2, rel=1e-12)
    assert rademacher_bound(200, 1, 1.0, 8.0, 8.0)[0] == pytest.approx(b.complexity / 2, rel=1e-15)
    # the linear class's constants and its bound (s = 0.2: L_phi = 10)
    assert linear_class_constants(3, 0.2) == {"n_params": 9, "radius": pytest.approx(np.sqrt(3)), "phi_lipschitz": 10.0}
    pb = linear_class_bound(256, 64, 0.1, 5.5, p=3, s=0.2, eta=0.05)
    assert pb.loss_lipschitz == pytest.approx(400.0) and pb.loss_range == pytest.approx(40.0)
    assert pb.bias == pytest.approx(5.5 / 64) and pb.complexity < 2 * 40.0
    assert pb == theorem1_bound(256, 64, 0.1, n_params=9, radius=np.sqrt(3), phi_lipschitz=10.0, eta=0.05, c1=5.5)
    for bad, match in (({"eta": 1.0}, "'eta'"), ({"phi_lipschitz": 0.0}, "'phi_lipschitz'")):
        with pytest.raises(ValueError, match=match):
            theorem1_bound(10, 2, 0.5, **{"n_params": 1, "radius": 1.0, "phi_lipschitz": 1.0, **bad})
    with pytest.raises(ValueError, match="'s' must be"):
        linear_class_constants(3, 0.0)


def test_linear_class_lipschitz_constant_from_a_net_centre():
    """|W x/|W x| - V x/|V x|| <= (2/s) ||W - V||_F for V in Theta_s (the inequality the bound uses), on
    random V with sigma_min/sigma_max >= s, random W and x (deterministic: a proven inequality)."""
    rng = np.random.default_rng(7)
    s = 0.2
    worst = 0.0
    for _ in range(200):
        u, _, vt = np.linalg.svd(rng.standard_normal((3, 3)))
        V = u @ np.diag([1.0, rng.uniform(s, 1), s]) @ vt  # ||V||_op = 1, sigma_min = s
        W = V + 10 ** rng.uniform(-4, 0) * rng.standard_normal((3, 3))
        x = rng.standard_normal((256, 3))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        fw = x @ W.T / np.linalg.norm(x @ W.T, axis=1, keepdims=True)
        fv = x @ V.T / np.linalg.norm(x @ V.T, axis=1, keepdims=True)
        worst = max(worst, np.max(np.linalg.norm(fw - fv, axis=1)) / (2 / s * np.linalg.norm(W - V)))
    assert 0.05 < worst <= 1.0


def test_positive_control_complexity_grows_like_sqrt_k():
    """tau_k = tau sqrt(k_ref / k): the loss Lipschitz constant and range, and hence the Theorem-1
    complexity term, grow exactly like sqrt(k); at fixed tau the complexity term is k-free."""
    ks = [64, 128, 256, 512, 1024]
    taus = [control_tau(0.1, k, 64) for k in ks]
    np.testing.assert_allclose(taus, 0.1 * np.sqrt(64 / np.array(ks)), rtol=1e-15)
    assert taus[0] == 0.1 and taus[-1] == pytest.approx(0.025, rel=1e-15)
    ctl = [linear_class_bound(256, k, t, p=3, s=0.2, eta=0.05) for k, t in zip(ks, taus)]
    main = [linear_class_bound(256, k, 0.1, p=3, s=0.2, eta=0.05) for k in ks]
    for k, c, m in zip(ks, ctl, main):
        r = np.sqrt(k / 64)
        assert c.loss_lipschitz == pytest.approx(r * main[0].loss_lipschitz, rel=1e-12)
        assert c.loss_range == pytest.approx(r * main[0].loss_range, rel=1e-12)
        # both constants scale by r: the minimising eps is unchanged and the term scales by r
        assert c.complexity == pytest.approx(r * main[0].complexity, rel=1e-9)
        assert m.complexity == main[0].complexity and m.variability == main[0].variability


def test_compare_to_bound_masks():
    """Specified points need a finite bound, the whole class inside (in_class == 1) and a finite upper limit."""
    bound = np.array([1.0, 1.0, 1.0, np.nan, 2.0, 1.0])
    upper = np.array([0.5, 1.5, 0.9, 0.1, np.nan, 0.2])
    in_class = np.array([1.0, 1.0, 0.75, 1.0, 1.0, 1.0])
    c = compare_to_bound(bound, upper, in_class)
    assert c.specified.tolist() == [True, True, False, False, False, True]
    assert c.above.tolist() == [False, True, False, False, False, False]
    assert c.outside.tolist() == [False, False, True, False, True, False]
    assert c.max_ratio == 1.5 and not c.passed
    ok = compare_to_bound(bound, np.minimum(upper, 0.9), in_class)
    assert ok.passed and ok.max_ratio == 0.9
    none = compare_to_bound(bound, upper, np.zeros(6))
    assert not none.specified.any() and np.isnan(none.max_ratio) and not none.passed
