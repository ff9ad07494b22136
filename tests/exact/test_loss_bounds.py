"""The loss-difference bounds of claim C4 (simkit.exact.loss_bounds; docs/theory.md section 12).

Per-tuple values against a direct evaluation (scipy logsumexp, explicit loops); the Gateaux derivative
of l_k along a perturbation of the embeddings is the softmax average (central differences); the
convexity bracket g'(0) <= dl <= g'(1); the bounds hold and are ordered B_score <= B_avg <= B_max on
adversarial pairs (unrelated embeddings, tau from 0.02 to 50) and for the localised bump psi on every
tuple; negative controls: two wrong "bounds" (one endpoint's weights only; no anchor/positive term) are
caught by the violation count. All deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import logsumexp

from simkit.embeddings.embedding import TwoLayerEmbedding
from simkit.embeddings.perturbation import CapBump
from simkit.exact.loss_bounds import loss_difference_bounds, violations


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _tuples(rng, N, K, d):
    """Random unit vectors for (u, v, w) under phi and an unrelated psi."""
    g = lambda *s: _unit(rng.standard_normal(s))  # noqa: E731
    return g(N, d), g(N, d), g(N, K, d), g(N, d), g(N, d), g(N, K, d)


def _loss(u, v, w, tau):
    s = np.concatenate([[u @ v], w @ u]) / tau
    return logsumexp(s) - s[0]


# ----------------------------------------------------------------------------------------------
# the bounds

@pytest.mark.parametrize("tau", [0.05, 0.5, 5.0])
def test_bounds_match_direct_evaluation(tau):
    """Every output for every tuple and k against explicit per-tuple formulas (rtol 1e-10)."""
    rng = np.random.default_rng(1)
    N, K, d = 4, 9, 5
    u, v, w, u2, v2, w2 = _tuples(rng, N, K, d)
    ks = np.array([1, 2, 5, 9])
    b = loss_difference_bounds(u, v, w, u2, v2, w2, tau, ks)
    for i in range(N):
        du, dv = np.linalg.norm(u2[i] - u[i]), np.linalg.norm(v2[i] - v[i])
        for g, k in enumerate(ks):
            l1, l2 = _loss(u[i], v[i], w[i, :k], tau), _loss(u2[i], v2[i], w2[i, :k], tau)
            dw = np.linalg.norm(w2[i, :k] - w[i, :k], axis=1)
            r1 = (w[i, :k] @ u[i] - u[i] @ v[i]) / tau
            r2 = (w2[i, :k] @ u2[i] - u2[i] @ v2[i]) / tau
            P1 = np.exp(r1 - np.logaddexp(0, logsumexp(r1)))
            P2 = np.exp(r2 - np.logaddexp(0, logsumexp(r2)))
            q1, q2 = P1 / P1.sum(), P2 / P2.sum()
            want = {"loss": l1, "delta": l2 - l1,
                    "bound_score": max(P1 @ np.abs(r2 - r1), P2 @ np.abs(r2 - r1)),
                    "neg_avg": max(q1 @ dw, q2 @ dw), "neg_max": dw.max(),
                    "bound_avg": (2 * du + dv + max(q1 @ dw, q2 @ dw)) / tau,
                    "bound_max": (2 * du + dv + dw.max()) / tau}
            for name, value in want.items():
                assert b[name][i, g] == pytest.approx(value, rel=1e-10, abs=1e-13), (name, i, k)
        assert b["anchor_term"][i] == pytest.approx(2 * du + dv, rel=1e-12)


def test_default_grid_is_every_k():
    rng = np.random.default_rng(2)
    t = _tuples(rng, 3, 6, 4)
    full = loss_difference_bounds(*t, 0.7)
    some = loss_difference_bounds(*t, 0.7, [2, 6])
    assert full["delta"].shape == (3, 6)
    np.testing.assert_array_equal(full["bound_avg"][:, [1, 5]], some["bound_avg"])


def test_gateaux_derivative_is_softmax_average():
    """d/dt l_k(phi + t h) at t = 0 equals (1/tau) sum_j P_j [h(x).(w_j - v) + u.(h(x-_j) - h(x+))]
    (the loss as a function of arbitrary vectors; central difference, step 1e-6, agreement 1e-7)."""
    rng = np.random.default_rng(3)
    tau, K, d = 0.3, 12, 6
    u, v = _unit(rng.standard_normal(d)), _unit(rng.standard_normal(d))
    w = _unit(rng.standard_normal((K, d)))
    hu, hv, hw = rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal((K, d))

    def loss(t):
        return _loss(u + t * hu, v + t * hv, w + t * hw, tau)

    num = (loss(1e-6) - loss(-1e-6)) / 2e-6
    r = (w @ u - u @ v) / tau
    P = np.exp(r - np.logaddexp(0, logsumexp(r)))
    formula = P @ (hu @ (w - v).T + (hw - hv) @ u) / tau
    assert num == pytest.approx(formula, abs=1e-7)
    assert P.sum() < 1  # the weights of the negatives sum to 1 - P_0


def test_convexity_bracket():
    """g'(0) <= l(psi) - l(phi) <= g'(1) on the score segment (the step that removes intermediate points)."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        K = int(rng.integers(1, 20))
        r, r2 = rng.normal(0, 3, K), rng.normal(0, 3, K)
        G = lambda x: np.logaddexp(0, logsumexp(x))  # noqa: E731
        P = lambda x: np.exp(x - G(x))  # noqa: E731
        dl = G(r2) - G(r)
        assert P(r) @ (r2 - r) <= dl + 1e-12
        assert dl <= P(r2) @ (r2 - r) + 1e-12


@pytest.mark.parametrize("tau", [0.02, 0.5, 50.0])
def test_bounds_hold_on_adversarial_pairs(tau):
    """Unrelated embeddings (distances up to 2), 400 tuples x 64 negatives: no violation, and
    B_score <= B_avg <= B_max tuple by tuple (an average is at most a maximum)."""
    rng = np.random.default_rng(5)
    b = loss_difference_bounds(*_tuples(rng, 400, 64, 3), tau)
    for name in ("bound_score", "bound_avg", "bound_max"):
        assert not violations(b["delta"], b[name], b["loss"]).any(), name
    assert np.all(b["bound_score"] <= b["bound_avg"] * (1 + 1e-12))
    assert np.all(b["bound_avg"] <= b["bound_max"] * (1 + 1e-12))
    assert np.all(b["neg_avg"] <= b["neg_max"] * (1 + 1e-12))


def test_negative_controls_wrong_bounds_are_caught():
    """Two plausible but wrong 'bounds' that the violation count must flag:
    (a) the score-level average with phi's softmax weights only (no maximum over the two endpoints,
    i.e. the derivative at t = 0 taken for the whole segment): violated on ~1/4 of adversarial tuples;
    (b) the averaging bound without its anchor/positive term, for a psi that moves only the anchor's
    embedding: the negatives' term is 0, the loss still changes."""
    rng = np.random.default_rng(6)
    u, v, w, u2, v2, w2 = _tuples(rng, 400, 64, 3)
    tau = 0.5
    b = loss_difference_bounds(u, v, w, u2, v2, w2, tau)
    r = np.einsum("nd,nkd->nk", u, w - v[:, None, :]) / tau
    r2 = np.einsum("nd,nkd->nk", u2, w2 - v2[:, None, :]) / tau
    lse = np.logaddexp.accumulate(r, axis=1)
    one_sided = np.cumsum(np.exp(r) * np.abs(r2 - r), axis=1) / np.exp(np.logaddexp(0.0, lse))
    assert not violations(b["delta"], b["bound_score"], b["loss"]).any()
    assert violations(b["delta"], one_sided, b["loss"]).sum() > 1000
    b2 = loss_difference_bounds(u, v, w, u2, v, w, tau)  # only the anchor moves
    assert np.all(b2["neg_avg"] == 0) and not violations(b2["delta"], b2["bound_avg"], b2["loss"]).any()
    assert violations(b2["delta"], b2["neg_avg"] / tau, b2["loss"]).mean() > 0.9


def test_bounds_invalid_inputs():
    rng = np.random.default_rng(7)
    t = _tuples(rng, 3, 4, 5)
    with pytest.raises(ValueError, match="'w' must have shape"):
        loss_difference_bounds(t[0], t[1], t[2][0], *t[3:], 0.5)
    with pytest.raises(ValueError, match="'v2' must have shape"):
        loss_difference_bounds(*t[:4], t[4][:2], t[5], 0.5)
    with pytest.raises(ValueError, match="'tau' must be a finite number > 0"):
        loss_difference_bounds(*t, 0.0)
    with pytest.raises(ValueError, match="'ks' must hold numbers of negatives in 1..4"):
        loss_difference_bounds(*t, 0.5, [0, 2])


def _bump(fraction=2.0 ** -4, amplitudes=(0.04, 0.4, 2.0), seed=11):
    phi = TwoLayerEmbedding.random(3, 16, 32, rng=seed)
    return phi, CapBump.random(phi, 3, fraction, list(amplitudes), rng=seed + 1)


@pytest.mark.parametrize("tau", [0.02, 0.5])
def test_bounds_hold_for_the_bump(tau):
    """Deterministic: the proved bounds hold on every tuple and every k for the non-parametric bump psi,
    including a huge amplitude (psi(c) nearly orthogonal to phi(c)) and tuples whose anchor or positive
    lies in the cap; the max bound is the larger; tuples with nothing in the cap have dl and B_avg at
    rounding level."""
    rng = np.random.default_rng(13)
    N, K = 300, 256
    phi, psis = _bump(fraction=2.0 ** -3, amplitudes=(0.4, 2.0, 1e3))
    x = _unit(rng.standard_normal((N, 3)))
    x[:20] = _unit(psis[0].centre + 0.05 * rng.standard_normal((20, 3)))  # anchors near the centre
    xp = _unit(x + 0.1 * rng.standard_normal((N, 3)))
    y = _unit(rng.standard_normal((N * K, 3)))
    u, v, w = phi(x), phi(xp), phi(y).reshape(N, K, 16)
    for psi in psis:
        b = loss_difference_bounds(u, v, w, psi(x), psi(xp), psi(y).reshape(N, K, 16), tau)
        for name in ("bound_score", "bound_avg", "bound_max"):
            assert not violations(b["delta"], b[name], b["loss"]).any(), (name, psi.amplitude)
        assert np.all(b["bound_avg"] <= b["bound_max"] * (1 + 1e-12))
        # (tuple, k) pairs with neither the anchor, the positive nor any of the first k negatives in the cap
        hit = np.logical_or.accumulate(psi.profile(y.reshape(N, K, 3)) > 0, axis=1)
        untouched = ~(hit | (psi.profile(x) > 0)[:, None] | (psi.profile(xp) > 0)[:, None])
        assert untouched.any() and (~untouched).any()
        assert np.all(np.abs(b["delta"][untouched]) < 1e-13) and np.all(b["bound_avg"][untouched] < 1e-13)
