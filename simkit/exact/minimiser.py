"""The InfoNCE minimiser over a parametric score class, exactly, for a finite π (docs/theory.md §17).

The class is linear in its parameters, ``s_θ(x_a, y_b) = Σ_p θ_p F[p, a, b]`` for a feature array F
(one feature ``x·y`` gives s = θ x·y), so CE(θ) and R_k(θ) are convex. For π on N atoms and a
row-stochastic positive kernel M:

* :func:`cross_entropy` -- CE(θ), its gradient and Hessian (closed form);
* :func:`bias_constant` -- c1(θ) and its gradient (closed form);
* :func:`risk` and :func:`risk_gradient` -- ``R_k(θ) − log k`` and its gradient at every k, exactly
  (i.i.d. negatives from π; the Frullani identity of :mod:`simkit.exact.curve` for the value, its
  θ-derivative ``E[Σ F e^{s}/Y] = ∫ E[Ẏ e^{−tY}] dt`` for the gradient);
* :func:`minimise` -- θ*, θ_k (roots of the exact gradient), g = ∇c1(θ*), H = ∇²CE(θ*), and the
  predicted ``k(θ_k − θ*) → −H⁻¹g`` and ``k²(CE(θ_k) − CE(θ*)) → ½ gᵀH⁻¹g``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize
from scipy.special import logsumexp

from simkit._checks import check_weights
from simkit.exact.curve import TRAPEZOID_STEP, _cumulants, _g, expected_log_sum_parts

__all__ = ["ScoreClass", "cross_entropy", "bias_constant", "risk", "risk_gradient", "excess_cross_entropy",
           "MinimiserResult", "minimise"]

# integration range of the gradient's Frullani integral in w = log t (as in simkit.exact.curve):
# from t mu_k = e^{-40} (the integrand is ~ t there) to t Y_min = 45 (double-exponential decay)
_U_LO = math.exp(-40.0)
_TY_HI = 45.0


@dataclass(frozen=True)
class ScoreClass:
    """A finite problem: features ``F`` (P, N, N), anchor law ``pi`` (N,), positive kernel (N, N).

    ``s_θ(a, b) = Σ_p θ_p F[p, a, b]``; negatives are i.i.d. from π, positives from ``kernel[a]``.
    Validated once at construction.
    """

    features: NDArray[np.float64]
    pi: NDArray[np.float64]
    kernel: NDArray[np.float64]

    def __post_init__(self):
        f = np.asarray(self.features, dtype=float)
        if f.ndim == 2:
            f = f[None]
        if f.ndim != 3 or f.shape[1] != f.shape[2] or f.size == 0 or not np.all(np.isfinite(f)):
            raise ValueError(f"'features' must be a finite array of shape (P, N, N), got shape {np.shape(self.features)}")
        w = check_weights("pi", self.pi, f.shape[1])
        m = np.asarray(self.kernel, dtype=float)
        if m.shape != f.shape[1:] or not np.all(np.isfinite(m)) or np.any(m < 0) \
                or np.any(np.abs(m.sum(axis=1) - 1.0) > 1e-9):
            raise ValueError(f"'kernel' must be a row-stochastic ({f.shape[1]}, {f.shape[1]}) matrix")
        keep = w > 0  # anchors of zero probability are dropped (they stay as negatives' atoms)
        object.__setattr__(self, "features", f)
        object.__setattr__(self, "pi", w)
        object.__setattr__(self, "kernel", m / m.sum(axis=1, keepdims=True))
        object.__setattr__(self, "_keep", keep)

    @property
    def n_params(self) -> int:
        return self.features.shape[0]

    def scores(self, theta: ArrayLike) -> NDArray[np.float64]:
        """``s_θ`` as an (N, N) matrix."""
        th = np.atleast_1d(np.asarray(theta, dtype=float))
        if th.shape != (self.n_params,):
            raise ValueError(f"'theta' must have {self.n_params} entries, got shape {np.shape(theta)}")
        return np.tensordot(th, self.features, axes=1)


def _logs(c: ScoreClass):
    with np.errstate(divide="ignore"):
        return np.log(c.pi), np.log(c.kernel)


def cross_entropy(c: ScoreClass, theta: ArrayLike) -> tuple[float, NDArray[np.float64], NDArray[np.float64]]:
    """``CE(θ) = E[−s_θ(x, x⁺) + log Z_θ(x)]``, its gradient (P,) and Hessian (P, P).

    ``∇CE = E[−F(x, x⁺) + E_Q F]``, ``∇²CE = E_x Cov_{Q(x,·)}(F)``, Q(x, b) = π_b e^{s(x,b)}/Z(x).
    """
    s = c.scores(theta)
    lw, lm = _logs(c)
    k = c._keep
    lz = logsumexp(lw[None, :] + s, axis=1)[k]
    q = np.exp(lw[None, :] + s[k] - lz[:, None])  # (n, N)
    f = c.features[:, k, :]  # (P, n, N)
    w = c.pi[k]
    ef_m = np.einsum("pab,ab->pa", f, c.kernel[k])
    ef_q = np.einsum("pab,ab->pa", f, q)
    val = float(w @ (lz - np.sum(c.kernel[k] * s[k], axis=1)))
    grad = (ef_q - ef_m) @ w
    dev = f - ef_q[:, :, None]
    hess = np.einsum("a,pab,ab,rab->pr", w, dev, q, dev)
    return val, grad, hess


def bias_constant(c: ScoreClass, theta: ArrayLike) -> tuple[float, NDArray[np.float64]]:
    """``c1(θ) = E[m1/Z − (Z2/Z² − 1)/2]`` and its gradient (docs/theory.md §7, §17)."""
    s = c.scores(theta)
    lw, lm = _logs(c)
    k = c._keep
    s, lm_k = s[k], lm[k]
    lz = logsumexp(lw[None, :] + s, axis=1)
    q = np.exp(lw[None, :] + s - lz[:, None])  # Q weights, sum 1
    rho = np.exp(lm_k + s - lz[:, None])  # M e^s / Z, sum mu1
    sig = np.exp(lw[None, :] + 2.0 * s - 2.0 * lz[:, None])  # pi e^{2s} / Z^2, sum r2
    mu1, r2 = rho.sum(axis=1), sig.sum(axis=1)
    f = c.features[:, k, :]
    ef_q = np.einsum("pab,ab->pa", f, q)
    d_mu1 = np.einsum("pab,ab->pa", f, rho) - mu1 * ef_q
    d_r2 = 2.0 * np.einsum("pab,ab->pa", f, sig) - 2.0 * r2 * ef_q
    w = c.pi[k]
    return float(w @ (mu1 - 0.5 * (r2 - 1.0))), (d_mu1 - 0.5 * d_r2) @ w


def excess_cross_entropy(c: ScoreClass, theta: ArrayLike, theta_ref: ArrayLike) -> float:
    """``CE(θ) − CE(θ_ref)`` to full relative accuracy when θ is close to θ_ref.

    With ``Δ = s_θ − s_ref`` and Q the reference softmax kernel: ``Σ_x π(x)[−E_M Δ + E_Q Δ +
    log1p(E_Q g(Δ − E_Q Δ))]``, g(z) = e^z − 1 − z ≥ 0, so no O(1) terms cancel (only the first-order
    part, which vanishes at a stationary θ_ref, is a difference).
    """
    s0 = c.scores(theta_ref)
    delta = c.scores(theta) - s0
    lw, _ = _logs(c)
    k = c._keep
    q = np.exp(lw[None, :] + s0[k] - logsumexp(lw[None, :] + s0[k], axis=1)[:, None])
    d = delta[k]
    eq = np.sum(q * d, axis=1)
    first = eq - np.sum(c.kernel[k] * d, axis=1)
    second = np.log1p(np.sum(q * _g(d - eq[:, None]), axis=1))
    return float(c.pi[k] @ first + c.pi[k] @ second)


def risk(c: ScoreClass, theta: ArrayLike, ks: ArrayLike) -> NDArray[np.float64]:
    """``R_k(θ) − log k`` at every k (i.i.d. negatives from π), exactly: CE(θ) + gap_k(θ).

    ``gap_k = E_x[log1p(m1/(kZ)) + E log(Y_k/E Y_k)]`` from
    :func:`simkit.exact.curve.expected_log_sum_parts` (finite-set Frullani identity).
    """
    s = c.scores(theta)
    lw, lm = _logs(c)
    k = c._keep
    kf = np.atleast_1d(np.asarray(ks, dtype=float))
    _, centred = expected_log_sum_parts(s[k], c.kernel[k], s[k], c.pi, kf)
    lz = logsumexp(lw[None, :] + s[k], axis=1)
    mu1 = np.exp(logsumexp(lm[k] + s[k], axis=1) - lz)
    gap = c.pi[k] @ (np.log1p(mu1[:, None] / kf[None, :]) + centred)
    return cross_entropy(c, theta)[0] + gap


def _softmax_feature_mean(x0, w0, d0, x1, w1, d1, k: float) -> NDArray:
    """``E[(D0 + Σ_{i≤k} D_i) / (X0 + Σ_{i≤k} X_i)]`` per anchor, exactly.

    Atoms: positive values ``x0`` (b, N) > 0 with weights ``w0`` and derivative values ``d0`` (P, b, N);
    one negative likewise (``x1, w1, d1``), k i.i.d. negatives independent of the positive. Uses
    ``E[Ẏ/Y] = ∫_0^∞ E[Ẏ e^{−tY}] dt = ∫ (A0 L^k + k L0 L^{k−1} A) dt``, ``A = E[D e^{−tX}]``, with
    ``log L = c(t) − t E X`` from the centred cumulant functions of :mod:`simkit.exact.curve`;
    trapezoidal rule in w = log t.
    """
    m0, m1 = np.sum(w0 * x0, axis=1), np.sum(w1 * x1, axis=1)
    mu = m0 + k * m1
    ymin = np.min(np.where(w0 > 0, x0, np.inf), axis=1) + k * np.min(np.where(w1 > 0, x1, np.inf), axis=1)
    w_lo = math.log(_U_LO) - float(np.max(np.log(mu)))
    w_hi = math.log(_TY_HI) - float(np.min(np.log(ymin)))
    h = TRAPEZOID_STEP
    t = np.exp(w_lo + h * np.arange(int(math.ceil((w_hi - w_lo) / h)) + 1))
    c0, ll0 = _cumulants(t, x0, w0, m0)
    c1, ll1 = _cumulants(t, x1, w1, m1)
    e0 = np.exp(-t[None, :, None] * x0[:, None, :]) * w0[:, None, :]  # (b, T, N)
    e1 = np.exp(-t[None, :, None] * x1[:, None, :]) * w1[:, None, :]
    a0 = np.einsum("btn,pbn->pbt", e0, d0)
    a1 = np.einsum("btn,pbn->pbt", e1, d1)
    integrand = (a0 * np.exp(k * ll1 + np.log(t)[None, :])
                 + a1 * k * np.exp(ll0 + (k - 1.0) * ll1 + np.log(t)[None, :]))
    return h * integrand.sum(axis=2).T  # (b, P)


def risk_gradient(c: ScoreClass, theta: ArrayLike, k: float) -> NDArray[np.float64]:
    """``∇_θ R_k(θ)`` exactly: ``E[−F(x, x⁺)] + E_x E[Σ_{i=0..k} F(x, y_i) e^{s_i} / Σ_i e^{s_i}]``.

    The finite-set Frullani machinery of :mod:`simkit.exact.curve` gives the value of R_k, not its
    gradient; the gradient's integral is :func:`_softmax_feature_mean` (same grid and cumulants).
    """
    s = c.scores(theta)
    kk = c._keep
    s = s[kk]
    f = c.features[:, kk, :]
    m = c.kernel[kk]
    shift = np.max(s, axis=1)
    x = np.exp(s - shift[:, None])
    w1 = np.broadcast_to(c.pi, x.shape)
    soft = _softmax_feature_mean(x, m, f * x[None], x, w1, f * x[None], float(k))
    ef_m = np.einsum("pab,ab->ap", f, m)
    return c.pi[kk] @ (soft - ef_m)


@dataclass(frozen=True)
class MinimiserResult:
    """θ*, θ_k and the predicted constants of docs/theory.md §17.

    Attributes
    ----------
    ks : ndarray (n_k,)
    theta_star : ndarray (P,)
        Minimiser of CE.
    ce_star : float
    theta_k : ndarray (n_k, P)
        Minimisers of R_k (roots of the exact gradient).
    grad_norm : ndarray (n_k,)
        ``max_p |∂_p R_k(θ_k)|`` at the returned roots.
    excess : ndarray (n_k,)
        ``CE(θ_k) − CE(θ*)`` (nats).
    g, hessian : ndarray
        ``∇c1(θ*)`` and ``∇²CE(θ*)``.
    shift_const : ndarray (P,)
        ``−H⁻¹g``, the limit of ``k(θ_k − θ*)``.
    excess_const : float
        ``½ gᵀH⁻¹g``, the limit of ``k² (CE(θ_k) − CE(θ*))``.
    """

    ks: NDArray[np.float64]
    theta_star: NDArray[np.float64]
    ce_star: float
    theta_k: NDArray[np.float64]
    grad_norm: NDArray[np.float64]
    excess: NDArray[np.float64]
    g: NDArray[np.float64]
    hessian: NDArray[np.float64]
    shift_const: NDArray[np.float64]
    excess_const: float


def _ce_minimiser(c: ScoreClass, theta0: NDArray, tol: float) -> NDArray:
    """Damped Newton on the convex CE (closed-form gradient and Hessian)."""
    th = np.array(theta0, dtype=float)
    for _ in range(200):
        val, grad, hess = cross_entropy(c, th)
        if np.max(np.abs(grad)) <= tol:
            return th
        step = np.linalg.solve(hess, grad)
        lam = 1.0
        while cross_entropy(c, th - lam * step)[0] > val + 1e-15 * abs(val) and lam > 1e-8:
            lam *= 0.5
        th = th - lam * step
    raise RuntimeError(f"Newton on CE did not reach |grad| <= {tol} (last {np.max(np.abs(grad))!r})")


def minimise(c: ScoreClass, ks: ArrayLike, *, theta0: ArrayLike | None = None, tol: float = 1e-13
             ) -> MinimiserResult:
    """θ* = argmin CE, θ_k = argmin R_k at every k, and the predicted shift and excess constants.

    θ_k solves ``∇R_k(θ) = 0`` (scipy.optimize.root, MINPACK hybrid, xtol ``tol``) started from θ*
    − H⁻¹∇c1(θ*)/k; both objectives are convex in θ. Raises if the root's gradient exceeds 1e-11.
    """
    kf = np.atleast_1d(np.asarray(ks, dtype=float))
    if kf.ndim != 1 or kf.size == 0 or np.any(kf < 1) or np.any(kf != np.round(kf)):
        raise ValueError(f"'ks' must be a 1-D array of integers >= 1, got {ks!r}")
    th0 = np.zeros(c.n_params) if theta0 is None else np.atleast_1d(np.asarray(theta0, dtype=float))
    star = _ce_minimiser(c, th0, 1e-14)
    ce_star, _, hess = cross_entropy(c, star)
    _, g = bias_constant(c, star)
    shift = -np.linalg.solve(hess, g)
    excess_const = float(0.5 * g @ np.linalg.solve(hess, g))
    thetas = np.empty((kf.size, c.n_params))
    gnorm = np.empty(kf.size)
    excess = np.empty(kf.size)
    for i, k in enumerate(kf):
        sol = optimize.root(lambda th: risk_gradient(c, th, k), star + shift / k, method="hybr",
                            options={"xtol": tol})
        gr = risk_gradient(c, sol.x, k)
        gnorm[i] = float(np.max(np.abs(gr)))
        if gnorm[i] > 1e-11:
            raise RuntimeError(f"the root of grad R_k at k = {k:g} has |grad| = {gnorm[i]!r} ({sol.message})")
        thetas[i] = sol.x
        excess[i] = excess_cross_entropy(c, sol.x, star)
    return MinimiserResult(kf, star, ce_star, thetas, gnorm, excess, g, hess, shift, excess_const)
