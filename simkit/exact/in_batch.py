"""In-batch negatives: exact limits, expansion constants and finite-batch risks (docs/theory.md §16).

Three ways of drawing the k negatives of an anchor x (positive x⁺ ~ M(x, ·)):

* ``"iid"`` -- k i.i.d. draws from π (the paper's setting);
* ``"ntxent"`` -- SimCLR's NT-Xent with batch B: the k = 2B − 2 views {x_j, x_j⁺ : j ≠ i} of the other
  B − 1 items, i.e. B − 1 i.i.d. *pairs* (y, y'), y ~ π, y' ~ M(y, ·);
* ``"clip"`` -- CLIP-style: the k = B − 1 other items' second views, i.i.d. from πM.

Each scheme is "n i.i.d. units of ``size`` negatives" (size 2 for a pair, else 1), so with the
per-negative mean ζ(x) = E[unit]/size the loss satisfies
``E ℓ_k − log k = L + c1/k + c2/k² + O(1/k³)``, ``L = E[−s(x, x⁺) + log ζ(x)]``: ζ = Z_π (iid),
(Z_π + Z_πM)/2 (ntxent), Z_πM (clip). Public functions:

* :func:`finite_constants` -- L, c1, c2 and the pair covariance for a finite π (any score matrix);
* :func:`finite_curve` -- the exact ``E ℓ_k − log k`` at every k (Frullani identity of
  :mod:`simkit.exact.curve`, the unit's law as the "one negative"), no expansion;
* :func:`sphere_constants` -- the same constants for uniform π on S^{d−1}, a vMF(κ) kernel and
  s = x·y/τ (there πM = π), by one-dimensional quadrature of closed-form inner integrals;
* :func:`negatives_in_batch` -- k as a function of the batch size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from simkit._checks import check_int, check_scalar, check_weights
from simkit._jit.special import log_vmf_norm, mean_resultant_length
from simkit.exact.curve import _theta_rule, expected_log_sum_parts

__all__ = ["SCHEMES", "BatchConstants", "BatchCurve", "negatives_in_batch", "finite_constants",
           "finite_curve", "sphere_constants", "finite_anchor_terms", "sphere_anchor_terms"]

#: the negative-sampling schemes, in the order reports list them
SCHEMES = ("iid", "ntxent", "clip")
_UNIT_SIZE = {"iid": 1, "ntxent": 2, "clip": 1}


@dataclass(frozen=True)
class BatchConstants:
    """Limit and expansion constants of ``E ℓ_k − log k = limit + c1/k + c2/k² + O(1/k³)``.

    Attributes
    ----------
    scheme : str
        ``"iid"``, ``"ntxent"`` or ``"clip"``.
    limit : float
        ``E[−s(x, x⁺) + log ζ(x)]`` (nats): a cross-entropy of M against the softmax kernel with base
        measure π (iid), (π + πM)/2 (ntxent) or πM (clip).
    c1, c2 : float
        The 1/k and 1/k² constants (k = number of negatives).
    pair_cov : float
        ``E_x[Cov(e^{s(x,y)}, e^{s(x,y')}) / ζ(x)²]``, y ~ π, y' ~ M(y, ·) (0 for iid and clip):
        NT-Xent's c1 is ``E[m1/ζ] − (Var_π + Var_πM + 2 Cov)/(4ζ²)``.
    """

    scheme: str
    limit: float
    c1: float
    c2: float
    pair_cov: float = 0.0


@dataclass(frozen=True)
class BatchCurve:
    """Exact ``E ℓ_k − log k`` (``risk``) and ``gap = risk − limit`` on a grid of k (nats)."""

    scheme: str
    ks: NDArray[np.float64]
    risk: NDArray[np.float64]
    gap: NDArray[np.float64]
    limit: float


def _check_scheme(scheme) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"'scheme' must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    return scheme


def negatives_in_batch(scheme: str, batch_size: int) -> int:
    """Negatives per anchor in a batch of ``batch_size`` items: 2B − 2 (ntxent), B − 1 (clip)."""
    scheme = _check_scheme(scheme)
    if scheme == "iid":
        raise ValueError("'scheme' must be 'ntxent' or 'clip' for a batch size ('iid' has k itself)")
    b = check_int("batch_size", batch_size, low=2)
    return 2 * b - 2 if scheme == "ntxent" else b - 1


# ----------------------------------------------------------------------------------------------
# finite pi

def _check_finite(scores, pi, kernel, scheme) -> tuple[NDArray, NDArray, NDArray]:
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or s.size == 0 or not np.all(np.isfinite(s)):
        raise ValueError(f"'scores' must be a finite non-empty 2-D array (anchors x views), got shape {s.shape}")
    w = check_weights("pi", pi, s.shape[0])
    m = np.asarray(kernel, dtype=float)
    if m.shape != s.shape:
        raise ValueError(f"'kernel' must have the shape of 'scores' {s.shape}, got {m.shape}")
    if not np.all(np.isfinite(m)) or np.any(m < 0) or np.any(np.abs(m.sum(axis=1) - 1.0) > 1e-9):
        raise ValueError("'kernel' must be row-stochastic: finite, >= 0, every row summing to 1")
    if scheme != "clip" and s.shape[0] != s.shape[1]:
        raise ValueError(f"'scores' must be square for scheme {scheme!r} (negatives are views of the anchors' "
                         f"set), got shape {s.shape}")
    return s, w, m / m.sum(axis=1, keepdims=True)


def _unit_law(s: NDArray, w: NDArray, m: NDArray, scheme: str) -> tuple[NDArray, NDArray]:
    """Per-anchor log values of one unit's sum of e^{s} (n_anchor, U) and the unit's law (U,)."""
    if scheme == "iid":
        return s, w
    if scheme == "clip":
        return s, w @ m
    joint = (w[:, None] * m).ravel()  # P(y = b, y' = b')
    keep = joint > 0
    pair = np.logaddexp(s[:, :, None], s[:, None, :]).reshape(s.shape[0], -1)
    return pair[:, keep], joint[keep] / joint[keep].sum()


def _anchor_constants(s, m, unit, uw, size) -> tuple[NDArray, NDArray, NDArray, NDArray, NDArray]:
    """Per anchor: ``log ζ``, c1(x), c2(x) (in 1/k), ``l_∞(x) = −E[s0|x] + log ζ`` and ``m1/ζ``.

    The §8 expansion in the number n = k/size of i.i.d. units, with ``η = unit/(size ζ) − 1`` (mean 0)
    and the positive's weight ``e^{s0}/(size ζ)`` per unit; then ``c1 = size c1'``, ``c2 = size² c2'``.
    """
    with np.errstate(divide="ignore"):
        log_uw = np.log(uw)
        log_m = np.log(m)
    log_zeta = logsumexp(log_uw[None, :] + unit, axis=1) - math.log(size)
    eta = np.expm1(unit - math.log(size) - log_zeta[:, None])  # centred: no cancellation in its moments
    v2 = (eta * eta) @ uw
    v3 = (eta ** 3) @ uw
    rel = s - log_zeta[:, None] - math.log(size)
    mu1 = np.exp(logsumexp(log_m + rel, axis=1))
    mu2 = np.exp(logsumexp(log_m + 2.0 * rel, axis=1))
    c1 = mu1 - 0.5 * v2
    c2 = -0.5 * mu2 + mu1 * v2 + v3 / 3.0 - 0.75 * v2 * v2
    ell = log_zeta - np.sum(m * s, axis=1)
    return log_zeta, size * c1, size * size * c2, ell, size * mu1


def finite_constants(scores: ArrayLike, pi: ArrayLike, kernel: ArrayLike, scheme: str) -> BatchConstants:
    """Limit, c1, c2 (and the pair covariance) of a scheme for a finite π, exactly.

    Parameters
    ----------
    scores : array_like, shape (N, N')
        ``s(x_a, y_b)`` for anchor atom a and view atom b (square unless ``scheme="clip"``).
    pi : array_like, shape (N,)
        Probabilities of the anchor atoms.
    kernel : array_like, shape (N, N')
        Row-stochastic positive kernel ``M(a, b)``.
    scheme : {"iid", "ntxent", "clip"}

    Returns
    -------
    BatchConstants

    Notes
    -----
    docs/theory.md §16: ``c1 = E_x[m1/ζ − size·Var(unit/(size ζ))/2]``; for pairs
    ``Var(unit)/(4ζ²) = (Var_π e^s + Var_πM e^s + 2 Cov(e^{s(x,y)}, e^{s(x,y')}))/(4ζ²)``.
    """
    scheme = _check_scheme(scheme)
    s, w, m = _check_finite(scores, pi, kernel, scheme)
    size = _UNIT_SIZE[scheme]
    unit, uw = _unit_law(s, w, m, scheme)
    log_zeta, c1, c2, ell, _ = _anchor_constants(s, m, unit, uw, size)
    cov = 0.0
    if scheme == "ntxent":
        u = np.exp(s - log_zeta[:, None])  # e^{s(x, .)}/ζ(x)
        du = u - (u @ w)[:, None]  # centred under π
        dv = u - (u @ (w @ m))[:, None]  # centred under πM
        cov = float(w @ np.einsum("ab,b,bc,ac->a", du, w, m, dv))
    return BatchConstants(scheme, float(w @ ell), float(w @ c1), float(w @ c2), cov)


def finite_curve(scores: ArrayLike, pi: ArrayLike, kernel: ArrayLike, scheme: str, ks: ArrayLike) -> BatchCurve:
    """Exact ``E ℓ_k − log k`` of a scheme for a finite π at every k (no expansion).

    ``ks`` are numbers of negatives (even for ``"ntxent"``: k = 2B − 2). Given the anchor, the
    positive and the n = k/size units are independent, so :func:`simkit.exact.curve.expected_log_sum_parts`
    applies with the unit's law (N² atoms for a pair) as the law of "one negative":
    ``E ℓ_k − log k − l_∞(x) = log1p(m1/(kζ)) + E log(Y/E Y)``, to ~1e-15 absolute.
    """
    scheme = _check_scheme(scheme)
    s, w, m = _check_finite(scores, pi, kernel, scheme)
    kf = np.atleast_1d(np.asarray(ks, dtype=float))
    size = _UNIT_SIZE[scheme]
    if kf.ndim != 1 or kf.size == 0 or np.any(kf < size) or np.any(kf % size != 0):
        raise ValueError(f"'ks' must be a 1-D array of negatives counts, multiples of {size} and >= {size} "
                         f"for scheme {scheme!r}, got {ks!r}")
    unit, uw = _unit_law(s, w, m, scheme)
    _, _, _, ell, mu1 = _anchor_constants(s, m, unit, uw, size)
    keep = w > 0
    _, centred = expected_log_sum_parts(s[keep], m[keep], unit[keep], uw, kf / size)
    gap_x = np.log1p(mu1[keep][:, None] / kf[None, :]) + centred
    gap = w[keep] @ gap_x
    limit = float(w[keep] @ ell[keep])
    return BatchCurve(scheme, kf, limit + gap, gap, limit)


# ----------------------------------------------------------------------------------------------
# uniform pi on S^{d-1}, vMF kernel, s = x.y / tau

def _pair_moments(d: int, kappa: float, a: float, n_panels: int) -> dict[tuple[int, int], float]:
    """``log E[e^{j a t} e^{l a t'}]`` for (j, l) in {(1, 1), (2, 1)}, t = x·y, t' = x·y'.

    y uniform, y' ~ vMF(y, κ): ``E[e^{l a t'} | y] = C_d(κ)/C_d(‖κ y + l a x‖)`` and
    ``‖κ y + l a x‖² = κ² + l²a² + 2κ l a t``; t has density ∝ (1 − t²)^{(d−3)/2}.
    """
    theta, bw = _theta_rule(n_panels)
    t = np.cos(theta)
    log_wt = np.log(bw) + (d - 2) * np.log(np.sin(theta))
    log_wt -= logsumexp(log_wt)
    out = {}
    for j, l in ((1, 1), (2, 1)):
        r = np.sqrt(np.maximum(kappa * kappa + (l * a) ** 2 + 2.0 * kappa * l * a * t, 0.0))
        inner = float(log_vmf_norm(d, kappa)) - log_vmf_norm(d, r)
        out[(j, l)] = float(logsumexp(log_wt + j * a * t + inner))
    return out


def sphere_constants(d: int, kappa: float, tau: float, *, n_panels: int | None = None) -> dict[str, BatchConstants]:
    """``{scheme: BatchConstants}`` for uniform π on S^{d−1}, M(x, ·) = vMF(x, κ), s = x·y/τ.

    πM = π, so the three limits coincide with CE and clip's constants with iid's. With
    ``Z_j = C_d(0)/C_d(j/τ)``, ``m_j = C_d(κ)/C_d(κ + j/τ)`` and the pair moments
    ``J_jl = E[e^{j s(x,y)} e^{l s(x,y')}]`` (one-dimensional integrals, composite Gauss–Legendre;
    J_12 = J_21 because (y, y') is exchangeable), the unit ``P = e^{s(x,y)} + e^{s(x,y')}`` has
    ``E(P/2Z)² = (2Z_2 + 2J_11)/(4Z²)`` and ``E(P/2Z)³ = (2Z_3 + 6J_21)/(8Z³)``.
    """
    d = check_int("d", d, low=2)
    kappa = check_scalar("kappa", kappa, low=0.0)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    a = 1.0 / tau
    if n_panels is None:
        n_panels = int(math.ceil(16 + 4.0 * a + 6.0 * math.sqrt(kappa)))
    n_panels = check_int("n_panels", n_panels, low=1)
    lc0 = float(log_vmf_norm(d, 0.0))
    lz = {j: lc0 - float(log_vmf_norm(d, j * a)) for j in (1, 2, 3)}
    lm = {j: float(log_vmf_norm(d, kappa) - log_vmf_norm(d, kappa + j * a)) for j in (1, 2)}
    mean_s = a * _mean_cosine_vmf(d, kappa)
    limit = lz[1] - mean_s
    r2, r3 = math.exp(lz[2] - 2 * lz[1]), math.exp(lz[3] - 3 * lz[1])
    mu1, mu2 = math.exp(lm[1] - lz[1]), math.exp(lm[2] - 2 * lz[1])
    v2, v3 = r2 - 1.0, r3 - 3.0 * r2 + 2.0
    c1 = mu1 - 0.5 * v2
    c2 = -0.5 * mu2 + mu1 * v2 + v3 / 3.0 - 0.75 * v2 * v2
    iid = BatchConstants("iid", limit, c1, c2)
    lj = _pair_moments(d, kappa, a, n_panels)
    j11, j21 = math.exp(lj[(1, 1)] - 2 * lz[1]), math.exp(lj[(2, 1)] - 3 * lz[1])
    e2 = (2.0 * r2 + 2.0 * j11) / 4.0  # E(P/2Z)^2
    e3 = (2.0 * r3 + 6.0 * j21) / 8.0  # E(P/2Z)^3
    pv2, pv3 = e2 - 1.0, e3 - 3.0 * e2 + 2.0
    p1, p2 = 0.5 * mu1, 0.25 * mu2  # the positive's weight per pair
    nt = BatchConstants("ntxent", limit, 2.0 * (p1 - 0.5 * pv2),
                        4.0 * (-0.5 * p2 + p1 * pv2 + pv3 / 3.0 - 0.75 * pv2 * pv2), j11 - 1.0)
    return {"iid": iid, "ntxent": nt, "clip": BatchConstants("clip", limit, c1, c2)}


def _mean_cosine_vmf(d: int, kappa: float) -> float:
    """``E[x·x⁺] = A_d(κ)`` (0 at κ = 0)."""
    return float(mean_resultant_length(d, kappa)) if kappa > 0 else 0.0


# ----------------------------------------------------------------------------------------------
# per-anchor terms for control variates (simkit.estimators.in_batch)

def finite_anchor_terms(scores: ArrayLike, pi: ArrayLike, kernel: ArrayLike, scheme: str) -> dict[str, NDArray]:
    """Per anchor atom: ``log_zeta``, ``log_m1``, ``w2`` (unit's relative variance) and ``mean_s``.

    ``w2 = E[(V/(r ζ) − 1)² | x]`` for a unit V of r negatives (§16.1); ``mean_s = E[s(x, x⁺) | x]``.
    Arguments as :func:`finite_constants`.
    """
    scheme = _check_scheme(scheme)
    s, w, m = _check_finite(scores, pi, kernel, scheme)
    size = _UNIT_SIZE[scheme]
    unit, uw = _unit_law(s, w, m, scheme)
    with np.errstate(divide="ignore"):
        log_uw, log_m = np.log(uw), np.log(m)
    log_zeta = logsumexp(log_uw[None, :] + unit, axis=1) - math.log(size)
    eta = np.expm1(unit - math.log(size) - log_zeta[:, None])
    return {"log_zeta": log_zeta, "log_m1": logsumexp(log_m + s, axis=1), "w2": (eta * eta) @ uw,
            "mean_s": np.sum(m * s, axis=1)}


def sphere_anchor_terms(d: int, kappa: float, tau: float, scheme: str) -> dict[str, float]:
    """The terms of :func:`finite_anchor_terms` for uniform π on S^{d−1}, vMF(κ) kernel, s = x·y/τ.

    Constant in x: ``ζ = Z``, ``m1 = C_d(κ)/C_d(κ + 1/τ)``, ``mean_s = A_d(κ)/τ``;
    ``w2 = Z2/Z² − 1`` (iid, clip) or ``(Z2/Z² + J_11/Z²)/2 − 1`` (ntxent, J_11 from
    :func:`sphere_constants`' pair covariance).
    """
    scheme = _check_scheme(scheme)
    const = sphere_constants(d, kappa, tau)["ntxent"]
    d, kappa, tau = int(d), float(kappa), float(tau)
    a = 1.0 / tau
    lc0 = float(log_vmf_norm(d, 0.0))
    lz1, lz2 = lc0 - float(log_vmf_norm(d, a)), lc0 - float(log_vmf_norm(d, 2.0 * a))
    v2 = math.expm1(lz2 - 2.0 * lz1)
    w2 = 0.5 * (v2 + const.pair_cov) if scheme == "ntxent" else v2
    return {"log_zeta": lz1, "log_m1": float(log_vmf_norm(d, kappa) - log_vmf_norm(d, kappa + a)), "w2": w2,
            "mean_s": a * _mean_cosine_vmf(d, kappa)}
