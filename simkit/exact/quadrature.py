"""Product quadrature on S^1 and S^2 for expectations under a distribution pi (docs/theory.md sections 2, 4).

The softmax normaliser ``Z(x) = E_{y~pi} exp(phi(x).phi(y)/tau)`` has a closed form only when
``phi(x).phi(y) = x.y``. For a general embedding ``phi`` on the circle (p = 2) or the 2-sphere
(p = 3) it is computed here by quadrature to ~1e-12 relative accuracy, in log space; for a
``Discrete`` pi every expectation is an exact finite sum, in any dimension.

Public functions: :func:`sphere_rule` (the product rules: trapezoid on S^1; Gauss--Legendre in
cos(theta) x trapezoid in longitude on S^2, pole rotated to any unit vector), :func:`expect`
(``E_{y~pi} g(y)``), :func:`log_expect_exp` (``log E_{y~pi} exp(h(y))``) and :func:`log_partition`
(``log Z(x)`` for each anchor ``x``).

Method
------
A continuous pi is a von Mises--Fisher mixture ``sum_j w_j vMF(mu_j, kappa_j)`` (``Uniform`` is
kappa = 0); each component is integrated separately, with a rule whose pole sits at the peak of
that component's integrand. The rule size is doubled until two successive estimates agree to
``tol``, and a ``RuntimeError`` is raised if ``max_nodes`` is reached first: no silent inaccurate
value is ever returned.

Where the integrand is concentrated (effective concentration ``K`` above ~30) Gauss--Legendre in
cos(theta) would need O(sqrt(K)) nodes, which is ruinous at kappa = 1e6. There the polar angle is
graded instead: ``theta = a sinh(xi)`` with ``a = 5 / sqrt(K)`` and Gauss--Legendre in ``xi``,
which resolves the O(1/sqrt(K)) core and the whole tail out to the antipode with O(log K) nodes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import ive, logsumexp, roots_legendre

from simkit._checks import UNIT_TOL, check_int, check_scalar, check_unit_vectors
from simkit.distributions.sphere import Discrete, SphereDistribution

__all__ = ["sphere_rule", "expect", "log_expect_exp", "log_partition"]

_LOG_2PI = float(np.log(2.0 * np.pi))
# First rule size of the doubling sequence: GL nodes in cos(theta) for p = 3 (2 n^2 nodes in all),
# nodes on the circle for p = 2.
_N_START = {2: 32, 3: 16}
# Effective concentration above which the sinh-graded polar rule replaces the plain one (chosen by
# the node counts each needs for 1e-13 on exp(K cos theta); they cross near K = 30).
_K_GRADED = 30.0
_SINH_SCALE = 5.0
_CHUNK = 1 << 18  # nodes evaluated per call of a user function
_DEFAULT_MAX_NODES = 1 << 20
_TOL_MIN = 1e-14  # below this, rounding in sums of ~1e5 terms makes convergence a matter of luck


# --------------------------------------------------------------------------------------------
# Gauss--Legendre nodes accurate near the endpoints


class _GaussLegendre(NamedTuple):
    x: NDArray  # nodes in (-1, 1), descending
    one_minus_x: NDArray  # 1 - x without cancellation
    one_plus_x: NDArray  # 1 + x without cancellation
    sin: NDArray  # sqrt(1 - x^2)
    w: NDArray  # weights, sum 2


@functools.lru_cache(maxsize=32)
def _gauss_legendre(n: int) -> _GaussLegendre:
    """Gauss--Legendre rule on [-1, 1] with nodes parametrised by angle, ``x = cos(theta)``.

    Notes
    -----
    ``scipy.special.roots_legendre`` weights carry relative errors up to ~1e-10 for n ~ 256, and
    a node near x = 1 stored as a double has a relative error ~n^2 eps in ``1 - x``; both spoil
    1e-12 integrals of peaked integrands. Here scipy's nodes are only starting points for Newton's
    method in theta, with ``P_n(1 - s)`` evaluated by the difference form of the three-term
    recurrence (Reinsch's modification) in ``s = 2 sin^2(theta/2)``, so the angles near the pole
    are accurate to a few ulp *relative*. Weights ``w = 2 sin^2(theta) / (n P_{n-1})^2``. Nodes
    with x < 0 are mirror images.
    """
    # the n // 2 nodes with x > 0 (angles ascending); for odd n the middle node x = 0 is exact
    x_pos = np.sort(roots_legendre(n)[0])[::-1][: n // 2]
    theta = np.arccos(np.clip(x_pos, 0.0, 1.0))
    for _ in range(4):
        s = 2.0 * np.sin(0.5 * theta) ** 2
        p_prev, p, d = np.ones_like(s), 1.0 - s, -s
        for k in range(2, n + 1):
            d = ((k - 1) * d - (2 * k - 1) * s * p) / k
            p_prev, p = p, p + d
        theta = theta + p * np.sin(theta) / (n * (p_prev - (1.0 - s) * p))
    s = 2.0 * np.sin(0.5 * theta) ** 2
    p_prev, p, d = np.ones_like(s), 1.0 - s, -s
    for k in range(2, n):
        d = ((k - 1) * d - (2 * k - 1) * s * p) / k
        p_prev, p = p, p + d
    pn1 = p if n > 1 else p_prev  # P_{n-1} at the nodes
    sin_t = np.sin(theta)
    w = 2.0 * sin_t**2 / (n * pn1) ** 2
    c = 2.0 * np.cos(0.5 * theta) ** 2  # 1 + cos(theta)
    mid = []
    if n % 2:
        # P_{n-1}(0) = (-1)^m (n-2)!! / (n-1)!!, m = (n-1)/2, via a log-free product
        pm = 1.0
        for k in range(1, (n - 1) // 2 + 1):
            pm *= (2 * k - 1) / (2 * k)
        mid = [(0.0, 1.0, 1.0, 1.0, 2.0 / (n * pm) ** 2)]
    x = np.concatenate([np.cos(theta), [m[0] for m in mid], -np.cos(theta[::-1])])
    one_minus_x = np.concatenate([s, [m[1] for m in mid], c[::-1]])
    one_plus_x = np.concatenate([c, [m[2] for m in mid], s[::-1]])
    sin_all = np.concatenate([sin_t, [m[3] for m in mid], sin_t[::-1]])
    w_all = np.concatenate([w, [m[4] for m in mid], w[::-1]])
    for arr in (x, one_minus_x, one_plus_x, sin_all, w_all):
        arr.flags.writeable = False
    return _GaussLegendre(x, one_minus_x, one_plus_x, sin_all, w_all)


# --------------------------------------------------------------------------------------------
# Rules in a frame with the pole at a given unit vector


def _frames(poles: NDArray) -> NDArray:
    """Orthonormal frames ``(b, p, p)`` whose last column is the pole: ``[u, pole]`` for p = 2,
    ``[u, v, pole]`` with ``v = pole x u`` for p = 3 (the identity for the pole e_p)."""
    b, p = poles.shape
    if p == 2:
        u = np.stack([poles[:, 1], -poles[:, 0]], axis=1)
        return np.stack([u, poles], axis=2)
    e = np.zeros_like(poles)
    e[np.arange(b), np.argmin(np.abs(poles), axis=1)] = 1.0
    u = e - np.sum(e * poles, axis=1, keepdims=True) * poles
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    v = np.cross(poles, u)
    return np.stack([u, v, poles], axis=2)


def _polar_rule(p: int, n: int, conc: NDArray):
    """Polar part of the rule for each problem: cos, sin and ``1 - cos`` of the angle from the pole
    and log weights, each ``(b, n)``; p = 3 weights include the sin(theta) Jacobian.

    Plain rule (concentration <= _K_GRADED): Gauss--Legendre in cos(theta) (p = 3) or the
    trapezoid in the angle (p = 2). Graded rule: ``theta = a sinh(xi)``, ``a = 5/sqrt(K)``, with
    Gauss--Legendre in ``xi`` over ``[0, asinh(pi/a)]`` (p = 3) or ``[-asinh(pi/a), asinh(pi/a)]``
    (p = 2).
    """
    b = conc.shape[0]
    if p == 3:
        gl = _gauss_legendre(n)
        ct = np.tile(gl.x, (b, 1))
        st = np.tile(gl.sin, (b, 1))
        s = np.tile(gl.one_minus_x, (b, 1))
        lw = np.tile(np.log(gl.w), (b, 1))
    else:
        ang = 2.0 * np.pi * np.arange(n) / n
        ct = np.tile(np.cos(ang), (b, 1))
        st = np.tile(np.sin(ang), (b, 1))
        s = np.tile(2.0 * np.sin(0.5 * ang) ** 2, (b, 1))
        lw = np.full((b, n), _LOG_2PI - np.log(n))
    graded = conc > _K_GRADED
    if np.any(graded):
        gl = _gauss_legendre(n)
        a = _SINH_SCALE / np.sqrt(conc[graded])[:, None]
        xi_max = np.arcsinh(np.pi / a)
        if p == 3:
            xi = 0.5 * xi_max * gl.one_plus_x
            lwx = np.log(0.5 * gl.w * xi_max)
        else:
            xi = xi_max * gl.x
            lwx = np.log(gl.w * xi_max)
        th = np.minimum(a * np.sinh(xi), np.pi)
        sin_th = np.sin(th)
        ct[graded], st[graded] = np.cos(th), sin_th
        s[graded] = 2.0 * np.sin(0.5 * th) ** 2
        jac = np.log(a * np.cosh(xi))
        if p == 3:
            with np.errstate(divide="ignore"):
                jac = jac + np.log(sin_th)
        lw[graded] = lwx + jac
    return ct, st, s, lw


def _rule_size(p: int, n: int) -> int:
    return 2 * n * n if p == 3 else n


class _Nodes(NamedTuple):
    """A rule for a batch of b problems, N nodes each: ``y = ct * pole + st * tan`` with ``tan`` a
    unit vector orthogonal to the pole; ``s = 1 - ct`` is computed without cancellation."""

    y: NDArray  # (b, N, p)
    ct: NDArray  # (b, N)
    st: NDArray  # (b, N)
    s: NDArray  # (b, N)
    tan: NDArray  # (b, N, p)
    logw: NDArray  # (b, N)


def _build_nodes(p: int, n: int, poles: NDArray, conc: NDArray) -> _Nodes:
    """The rule of size n for each (pole, concentration)."""
    ct, st, s, lw = _polar_rule(p, n, conc)
    frames = _frames(poles)
    b = poles.shape[0]
    if p == 2:
        tan = np.broadcast_to(frames[:, None, :, 0], (b, n, 2))
        y = ct[..., None] * frames[:, None, :, 1] + st[..., None] * tan
        return _Nodes(y, ct, st, s, tan, lw)
    m = 2 * n
    lon = 2.0 * np.pi * np.arange(m) / m
    dirs = (np.cos(lon)[None, :, None] * frames[:, None, :, 0]
            + np.sin(lon)[None, :, None] * frames[:, None, :, 1])  # (b, m, 3)
    tan = np.broadcast_to(dirs[:, None, :, :], (b, n, m, 3)).reshape(b, n * m, 3)
    ct, st, s = (np.repeat(a, m, axis=1) for a in (ct, st, s))
    y = ct[..., None] * np.repeat(poles[:, None, :], n * m, axis=1) + st[..., None] * tan
    lw = np.repeat(lw + (_LOG_2PI - np.log(m)), m, axis=1)
    return _Nodes(y, ct, st, s, tan, lw)


def sphere_rule(p: int, n: int, *, pole: ArrayLike | None = None
                ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Product quadrature rule for the surface measure of S^{p-1}, p in {2, 3}.

    Parameters
    ----------
    p : int
        Ambient dimension: 2 (the circle S^1) or 3 (the sphere S^2).
    n : int
        Rule size, n >= 1. p = 2: ``n`` equally spaced angles (the trapezoid rule). p = 3: ``n``
        Gauss--Legendre nodes in ``cos(theta)`` times ``2 n`` equally spaced longitudes.
    pole : array_like, shape (p,), optional
        Unit vector at which the rule is centred: the first angle (p = 2) or the polar axis of the
        Gauss--Legendre direction (p = 3), where a peaked integrand is best resolved. Default
        ``(0, ..., 0, 1)``.

    Returns
    -------
    nodes : ndarray, shape (N, p)
        Points on S^{p-1} (last axis), ``N = n`` (p = 2) or ``2 n^2`` (p = 3).
    log_weights : ndarray, shape (N,)
        Log quadrature weights; the weights sum to the surface area, 2 pi or 4 pi.

    Raises
    ------
    ValueError
        If ``p`` is not 2 or 3, ``n`` is not a positive integer, or ``pole`` is not a unit vector
        in R^p.

    Notes
    -----
    p = 2: exact for trigonometric polynomials of degree <= n - 1 and spectrally accurate for
    smooth periodic integrands. p = 3: exact for polynomials in (y_1, y_2, y_3) of degree
    <= 2n - 1, whatever the pole. The Gauss--Legendre angles are computed to a few ulp relative
    to their distance from the poles, so concentrated integrands keep full precision.

    Examples
    --------
    >>> nodes, logw = sphere_rule(3, 8)
    >>> float(np.exp(logw).sum() / (4 * np.pi))  # doctest: +ELLIPSIS
    1.0...
    """
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or int(p) not in (2, 3):
        raise ValueError(f"'p' must be 2 (the circle S^1) or 3 (the sphere S^2), got {p!r}")
    p = int(p)
    n = check_int("n", n, low=1)
    if pole is None:
        pole_arr = np.zeros(p)
        pole_arr[-1] = 1.0
    else:
        pole_arr = check_unit_vectors("pole", pole, p)
        if pole_arr.ndim != 1:
            raise ValueError(f"'pole' must be a single unit vector of shape ({p},), got shape {pole_arr.shape}")
    rule = _build_nodes(p, n, pole_arr[None, :], np.zeros(1))
    return rule.y[0], rule.logw[0]


# --------------------------------------------------------------------------------------------
# The adaptive engine: a batch of integrals  int exp(logf(y)) sign(y) dsigma(y)


class _Batch(NamedTuple):
    """What a log-integrand sees: problem indices ``(b,)``, the poles ``(b, p)`` and the rule's
    nodes (``None`` for bare points ``y``, as when comparing starting poles)."""

    idx: NDArray
    poles: NDArray
    y: NDArray  # (b, N, p)
    nodes: _Nodes | None


def _one_minus_dot(v: NDArray, batch: _Batch) -> NDArray:
    """``1 - v_k . y`` for unit vectors ``v`` ``(b, p)`` at the batch nodes, ``(b, N)``.

    Notes
    -----
    At kappa = 1e6 the vMF density is exp(-kappa (1 - mu.y)), and an absolute error of one ulp in
    ``1 - mu.y`` -- which ``mu @ y`` and ``|mu - y|^2 / 2`` both make, the second through
    ``|y| != 1`` -- is a relative error of 1e-10 in the density. With
    ``y = cos(t) nu + sin(t) e`` (nu the pole, e a unit tangent) and ``alpha`` the angle between v and
    nu, ``1 - v.y = s + cos(t) (1 - cos(alpha)) - sin(t) (v.e)``: every term is small and carries
    only relative errors. ``alpha = atan2(|v x nu|, v.nu)`` is insensitive to the norms of v, nu.
    """
    if batch.nodes is None:
        return 0.5 * np.sum((batch.y - v[:, None, :]) ** 2, axis=2)
    nu = batch.poles
    if v.shape[1] == 2:
        cross = np.abs(v[:, 0] * nu[:, 1] - v[:, 1] * nu[:, 0])
    else:
        cross = np.linalg.norm(np.cross(v, nu), axis=1)
    alpha = np.arctan2(cross, np.sum(v * nu, axis=1))
    c = 2.0 * np.sin(0.5 * alpha) ** 2
    r = batch.nodes
    return r.s + r.ct * c[:, None] - r.st * np.einsum("bnp,bp->bn", r.tan, v)


def _call_rule(p, n, poles, conc, logf, idx, signed):
    """Evaluate one rule level for the given problems, chunked; returns shift m, signed sum S and
    absolute sum A with integral = S e^m and integral of |.| = A e^m."""
    size = _rule_size(p, n)
    step = max(1, _CHUNK // size)
    out_m, out_s, out_a = (np.empty(len(idx)) for _ in range(3))
    for lo in range(0, len(idx), step):
        sl = slice(lo, lo + step)
        rule = _build_nodes(p, n, poles[sl], conc[sl])
        lw = rule.logw
        res = logf(_Batch(idx[sl], poles[sl], rule.y, rule))
        loga, sign = res if signed else (res, None)
        l = lw + loga
        m = np.max(l, axis=1)
        finite = np.isfinite(m)
        shift = np.where(finite, m, 0.0)
        with np.errstate(under="ignore"):
            e = np.exp(l - shift[:, None])
        out_a[sl] = np.sum(e, axis=1)
        out_s[sl] = np.sum(e * sign, axis=1) if signed else out_a[sl]
        out_m[sl] = m
    return out_m, out_s, out_a


def _integrate(p, poles, conc, logf, *, tol, max_nodes, signed=False):
    """Integrals ``int exp(logf(y)) [sign(y)] dsigma(y)`` for a batch of problems, each with its own
    pole and concentration, doubling the rule size until two successive estimates agree:
    ``|I_n - I_2n| <= tol * int |integrand|`` (relative error for a positive integrand).

    Returns (m, S, A): integral ``S e^m``, integral of the absolute value ``A e^m``.
    """
    nb = poles.shape[0]
    res_m, res_s, res_a = np.full(nb, -np.inf), np.zeros(nb), np.zeros(nb)
    active = np.arange(nb)
    prev = None
    n = _N_START[p]
    worst = np.nan
    while active.size and _rule_size(p, n) <= max_nodes:
        m, S, A = _call_rule(p, n, poles[active], conc[active], logf, active, signed)
        if prev is not None:
            pm, pS, _ = prev
            top = np.maximum(m, pm)
            both_zero = ~np.isfinite(top)
            top = np.where(both_zero, 0.0, top)
            with np.errstate(under="ignore", invalid="ignore"):
                cur = np.where(np.isfinite(m), S * np.exp(m - top), 0.0)
                old = np.where(np.isfinite(pm), pS * np.exp(pm - top), 0.0)
                scale = np.where(np.isfinite(m), A * np.exp(m - top), 0.0)
            diff = np.abs(cur - old)
            done = both_zero | (diff <= tol * scale)
            with np.errstate(divide="ignore", invalid="ignore"):
                rel = np.where(done, 0.0, diff / np.where(scale > 0, scale, np.nan))
            worst = float(np.nanmax(rel)) if np.any(~done) else worst
            hit = active[done]
            res_m[hit], res_s[hit], res_a[hit] = m[done], S[done], A[done]
            active = active[~done]
            prev = (m[~done], S[~done], A[~done])
        else:
            prev = (m, S, A)
        n *= 2
    if active.size:
        raise RuntimeError(
            f"quadrature did not converge to tol={tol:g} within max_nodes={max_nodes} nodes per rule "
            f"for {active.size} of {nb} integral(s): the last two estimates differ by {worst:.3g} "
            f"(relative). The integrand may be discontinuous, or peaked far from the rule's pole; "
            f"increase 'max_nodes' or loosen 'tol'")
    return res_m, res_s, res_a


def _moments_recentre(p, poles, conc, logf, n_iter: int = 3):
    """Move each rule's pole to the mean direction of its (positive) integrand and set the
    concentration from the smallest tangent-plane variance, ``K = 1 / lambda_min``.

    A vMF(nu, K) integrand gives back nu and ~K. Three passes with the smallest rule recover the
    peak of a unimodal integrand to a small fraction of its width, even from a poor start.
    """
    poles = poles.copy()
    conc = conc.copy()
    n = _N_START[p]
    step = max(1, _CHUNK // _rule_size(p, n))
    idx_all = np.arange(poles.shape[0])
    for _ in range(n_iter):
        for lo in range(0, poles.shape[0], step):
            sl = slice(lo, lo + step)
            rule = _build_nodes(p, n, poles[sl], conc[sl])
            y = rule.y
            l = rule.logw + logf(_Batch(idx_all[sl], poles[sl], y, rule))
            m = np.max(l, axis=1, keepdims=True)
            ok = np.isfinite(m[:, 0])
            with np.errstate(under="ignore"):
                w = np.exp(l - np.where(np.isfinite(m), m, 0.0))
            tot = np.sum(w, axis=1, keepdims=True)
            ok &= tot[:, 0] > 0
            w /= np.where(tot > 0, tot, 1.0)
            mean = np.einsum("bn,bnp->bp", w, y)
            r = np.linalg.norm(mean, axis=1)
            ok &= r > 1e-8
            nu = mean[ok] / r[ok, None]
            z = y[ok] - np.sum(y[ok] * nu[:, None, :], axis=2, keepdims=True) * nu[:, None, :]
            zm = np.einsum("bn,bnp->bp", w[ok], z)
            cov = np.einsum("bn,bnp,bnq->bpq", w[ok], z, z) - zm[:, :, None] * zm[:, None, :]
            # the normal direction nu is (nearly) null: the tangent variances are the p-1 largest
            lam = np.linalg.eigvalsh(cov)[:, 1]
            k_new = np.where(lam > 0, 1.0 / np.maximum(lam, 1e-300), 1e12)
            target = np.flatnonzero(ok) + lo
            poles[target] = nu
            conc[target] = np.clip(k_new, 0.0, 1e12)
    return poles, conc


# --------------------------------------------------------------------------------------------
# pi as a list of vMF components


class _Components(NamedTuple):
    logw: NDArray  # (m,) log mixture weights (zero-weight components dropped)
    mus: NDArray  # (m, p)
    kappas: NDArray  # (m,)
    log_norm_scaled: NDArray  # (m,) log(C_p(kappa) e^kappa)


def _log_vmf_norm_scaled(p: int, kappa: NDArray) -> NDArray:
    """``log(C_p(kappa) e^kappa)`` for p in {2, 3}, so that the log density is this minus
    ``kappa (1 - mu.y)`` with no cancellation between two numbers of size kappa."""
    kappa = np.asarray(kappa, dtype=float)
    if p == 2:
        return -_LOG_2PI - np.log(ive(0.0, kappa))
    out = np.full(kappa.shape, -np.log(4.0 * np.pi))
    pos = kappa > 0
    kp = kappa[pos]
    out[pos] = np.log(kp) - _LOG_2PI - np.log(-np.expm1(-2.0 * kp))
    return out


def _components(pi: SphereDistribution) -> _Components | None:
    try:
        w, mus, kappas = pi.as_mixture()
    except TypeError:
        return None  # a continuous pi that is not a vMF mixture: use its logpdf
    w, mus, kappas = np.asarray(w, float), np.asarray(mus, float), np.asarray(kappas, float)
    keep = w > 0
    return _Components(np.log(w[keep]), mus[keep], kappas[keep],
                       _log_vmf_norm_scaled(pi.dim, kappas[keep]))


def _log_density(pi, comps: _Components | None, comp: NDArray, batch: _Batch) -> NDArray:
    """``log(w_j pdf_j(y))`` at the batch nodes, component ``comp[k]`` for problem ``k``."""
    if comps is None:
        return pi.logpdf(batch.y)
    q = _one_minus_dot(comps.mus[comp], batch)
    return (comps.logw[comp] + comps.log_norm_scaled[comp])[:, None] - comps.kappas[comp][:, None] * q


def _problem_set(pi, comps: _Components | None, n_anchor: int):
    """(anchor index, component index, pole, concentration) for every (anchor, component)."""
    p = pi.dim
    if comps is None:
        pole = np.zeros(p)
        pole[-1] = 1.0
        mus, kappas = pole[None, :], np.zeros(1)
    else:
        mus, kappas = comps.mus, comps.kappas
    m = len(kappas)
    anchor = np.repeat(np.arange(n_anchor), m)
    comp = np.tile(np.arange(m), n_anchor)
    return anchor, comp, mus[comp].copy(), kappas[comp].copy()


# --------------------------------------------------------------------------------------------
# Validation


def check_pi(pi) -> SphereDistribution:
    if not isinstance(pi, SphereDistribution):
        raise ValueError(f"'pi' must be a simkit distribution on the sphere (Uniform, VonMisesFisher, "
                         f"VMFMixture, Discrete), got {type(pi).__name__}")
    return pi


def _check_continuous_dim(pi) -> int:
    if pi.dim not in (2, 3):
        raise ValueError(
            f"'pi' must live on S^1 or S^2 (dim 2 or 3) for quadrature, got dim={pi.dim}; in higher "
            f"dimensions use a Discrete pi (exact for any embedding), or for phi = identity the "
            f"closed forms of simkit.exact (docs/theory.md section 4)")
    return pi.dim


def _check_callable(name: str, f) -> Callable:
    if not callable(f):
        raise ValueError(f"'{name}' must be a callable mapping points of shape (N, p) to values, "
                         f"got {type(f).__name__}")
    return f


def _check_tol(tol) -> float:
    tol = check_scalar("tol", tol, low=0.0, high=0.1, low_inclusive=False)
    if tol < _TOL_MIN:
        raise ValueError(f"'tol' must be >= {_TOL_MIN:g} (the rounding floor of the quadrature sums), "
                         f"got {tol!r}")
    return tol


def _check_max_nodes(max_nodes, p: int) -> int:
    low = _rule_size(p, 2 * _N_START[p])  # at least two levels, so that one comparison is made
    return check_int("max_nodes", max_nodes, low=low)


def _eval_scalar_fn(name: str, f: Callable, y: NDArray, *, allow_neg_inf: bool) -> NDArray:
    """Call a user function on ``(..., p)`` points flattened to ``(N, p)``; check ``(N,)`` output."""
    flat = y.reshape(-1, y.shape[-1])
    raw = f(flat)
    try:
        out = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must return real numbers, got {type(raw).__name__}") from None
    if out.shape != (flat.shape[0],):
        raise ValueError(f"'{name}' must map points of shape (N, {y.shape[-1]}) to values of shape "
                         f"(N,), got shape {out.shape} for N={flat.shape[0]}")
    bad = np.isnan(out) | (out == np.inf) | ((out == -np.inf) & (not allow_neg_inf))
    if np.any(bad):
        what = "finite" if not allow_neg_inf else "finite or -inf"
        raise ValueError(f"'{name}' must return {what} values, got {out[bad][0]!r}")
    return out.reshape(y.shape[:-1])


def _eval_embedding(phi: Callable, y: NDArray) -> NDArray:
    """``phi`` on ``(..., p)`` points -> ``(..., d')`` unit vectors (renormalised after the check)."""
    flat = y.reshape(-1, y.shape[-1])
    raw = phi(flat)
    try:
        out = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"'phi' must return an array of unit vectors, got {type(raw).__name__}") from None
    if out.ndim != 2 or out.shape[0] != flat.shape[0] or out.shape[1] < 1:
        raise ValueError(f"'phi' must map points of shape (N, {y.shape[-1]}) to an array of shape "
                         f"(N, d'), got shape {out.shape} for N={flat.shape[0]}")
    if not np.all(np.isfinite(out)):
        raise ValueError("'phi' must return finite values (no NaN or inf)")
    norms = np.sqrt(np.sum(out * out, axis=1))
    if out.size and np.max(np.abs(norms - 1.0)) > UNIT_TOL:
        worst = float(norms[np.argmax(np.abs(norms - 1.0))])
        raise ValueError(f"'phi' must return unit vectors (norm 1 within {UNIT_TOL:g}), found norm "
                         f"{worst:.6g}; normalise its output")
    return (out / norms[:, None]).reshape(*y.shape[:-1], out.shape[1])


# --------------------------------------------------------------------------------------------
# Public expectations


def expect(pi: SphereDistribution, g: Callable[[NDArray], ArrayLike], *, tol: float = 1e-11,
           max_nodes: int = _DEFAULT_MAX_NODES) -> float:
    """``E_{y~pi} g(y)`` by adaptive product quadrature (continuous pi) or as a finite sum (Discrete).

    Parameters
    ----------
    pi : SphereDistribution
        ``Uniform``, ``VonMisesFisher`` or ``VMFMixture`` on S^1 or S^2 (dim 2 or 3), or a
        ``Discrete`` pi in any dimension.
    g : callable
        Vectorised integrand: maps points of shape ``(N, p)`` (last axis) to values ``(N,)``. It
        should be smooth for fast convergence.
    tol : float, default 1e-11
        Convergence tolerance, in [1e-14, 0.1]: successive estimates for every mixture component
        must agree to ``tol`` relative to ``E|g|`` (so that integrals that vanish by cancellation
        converge too; for ``g >= 0`` this is the relative error).
    max_nodes : int, default 2**20
        Largest rule, in nodes per mixture component.

    Returns
    -------
    float
        The expectation.

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it), ``g`` returns values of the wrong shape
        or non-finite values, or ``pi`` is continuous in dimension > 3.
    RuntimeError
        If the rule reaches ``max_nodes`` nodes without two successive estimates agreeing.

    Notes
    -----
    ``E g = sum_j w_j int C(kappa_j) e^{kappa_j mu_j.y} g(y) dsigma(y)``; component j is integrated
    with the rule of :func:`sphere_rule` centred at ``mu_j`` (sinh-graded in the polar angle when
    kappa_j > 30, see the module notes), doubling ``n`` until converged. The vMF density is
    evaluated as ``C e^kappa * exp(-kappa (1 - mu.y))`` with ``1 - mu.y`` taken from the rule, so
    kappa up to 1e6 loses no precision. A continuous pi that is not a vMF mixture is integrated with
    its ``logpdf``.
    """
    pi = check_pi(pi)
    _check_callable("g", g)
    tol = _check_tol(tol)
    if isinstance(pi, Discrete):
        vals = _eval_scalar_fn("g", g, pi.points, allow_neg_inf=False)
        return float(np.dot(pi.weights, vals))
    p = _check_continuous_dim(pi)
    max_nodes = _check_max_nodes(max_nodes, p)
    comps = _components(pi)
    _, comp, poles, conc = _problem_set(pi, comps, 1)

    def logf(batch):
        gv = _eval_scalar_fn("g", g, batch.y, allow_neg_inf=False)
        with np.errstate(divide="ignore"):
            loga = _log_density(pi, comps, comp[batch.idx], batch) + np.log(np.abs(gv))
        return loga, np.sign(gv)

    m, S, _ = _integrate(p, poles, conc, logf, tol=tol, max_nodes=max_nodes, signed=True)
    with np.errstate(under="ignore"):
        return float(np.sum(np.where(np.isfinite(m), S * np.exp(np.where(np.isfinite(m), m, 0.0)), 0.0)))


def log_expect_exp(pi: SphereDistribution, h: Callable[[NDArray], ArrayLike], *, tol: float = 1e-11,
                   max_nodes: int = _DEFAULT_MAX_NODES, recentre: bool = True) -> float:
    """``log E_{y~pi} exp(h(y))``, computed in log space.

    Parameters
    ----------
    pi : SphereDistribution
        ``Uniform``, ``VonMisesFisher`` or ``VMFMixture`` on S^1 or S^2, or a ``Discrete`` pi in any
        dimension.
    h : callable
        Vectorised log-integrand: maps points ``(N, p)`` to values ``(N,)``; ``-inf`` is allowed
        (``exp(h) = 0``), NaN and ``+inf`` are not.
    tol : float, default 1e-11
        Successive estimates of each component's log integral must agree to ``tol`` (the relative
        error of the expectation), in [1e-14, 0.1].
    max_nodes : int, default 2**20
        Largest rule, in nodes per mixture component.
    recentre : bool, default True
        Move each component's rule to the mean direction of ``w_j pdf_j(y) e^{h(y)}`` (and size it
        from its spread) before integrating, which keeps rules small when ``e^h`` is peaked away
        from ``mu_j``. If False the pole stays at ``mu_j``, as in :func:`expect`.

    Returns
    -------
    float
        ``log E exp(h)`` (``-inf`` if ``exp(h) = 0`` almost everywhere).

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it).
    RuntimeError
        If ``max_nodes`` is reached before convergence.

    Notes
    -----
    Component j contributes ``logsumexp_i(log q_i + log w_j + log pdf_j(y_i) + h(y_i))`` over the
    rule's nodes y_i with log weights log q_i; the components are combined by ``logsumexp``. No
    exponential is formed outside a max-shifted sum, so ``h`` of any size is safe. This is the
    routine behind :func:`log_partition` (docs/theory.md section 2, ``log Z``).
    """
    pi = check_pi(pi)
    _check_callable("h", h)
    tol = _check_tol(tol)
    if isinstance(pi, Discrete):
        vals = _eval_scalar_fn("h", h, pi.points, allow_neg_inf=True)
        with np.errstate(divide="ignore"):
            return float(logsumexp(np.log(pi.weights) + vals))
    p = _check_continuous_dim(pi)
    max_nodes = _check_max_nodes(max_nodes, p)
    comps = _components(pi)
    _, comp, poles, conc = _problem_set(pi, comps, 1)

    def logf(batch):
        return _log_density(pi, comps, comp[batch.idx], batch) + _eval_scalar_fn(
            "h", h, batch.y, allow_neg_inf=True)

    if recentre:
        poles, conc = _moments_recentre(p, poles, conc, logf)
    m, S, _ = _integrate(p, poles, conc, logf, tol=tol, max_nodes=max_nodes)
    with np.errstate(divide="ignore"):
        return float(logsumexp(m + np.log(S))) if np.any(S > 0) else -np.inf


def log_partition(pi: SphereDistribution, x: ArrayLike, tau: float,
                  phi: Callable[[NDArray], ArrayLike] | None = None, *, tol: float = 1e-11,
                  max_nodes: int = _DEFAULT_MAX_NODES) -> NDArray[np.float64]:
    """``log Z(x) = log E_{y~pi} exp(phi(x).phi(y) / tau)`` for each anchor x (docs/theory.md section 2).

    Parameters
    ----------
    pi : SphereDistribution
        The data distribution: ``Uniform``, ``VonMisesFisher`` or ``VMFMixture`` on S^1 or S^2
        (dim 2 or 3), or a ``Discrete`` pi in any dimension.
    x : array_like, shape (..., p)
        Anchors, unit vectors on the last axis, ``p = pi.dim``.
    tau : float
        Temperature, > 0.
    phi : callable, optional
        Embedding: maps points ``(N, p)`` to unit vectors ``(N, d')``. Default: the identity.
    tol : float, default 1e-11
        Relative accuracy target for each ``Z(x)`` (absolute for ``log Z``), in [1e-14, 0.1].
    max_nodes : int, default 2**20
        Largest rule, in nodes per (anchor, mixture component).

    Returns
    -------
    ndarray, shape (...)
        ``log Z`` for each anchor (a 0-d array for a single anchor of shape ``(p,)``).

    Raises
    ------
    ValueError
        If an argument is invalid (the message names it), ``phi`` does not return unit vectors, or
        ``pi`` is continuous in dimension > 3 (use ``simkit.exact`` for phi = identity, or a
        ``Discrete`` pi).
    RuntimeError
        If ``max_nodes`` is reached before convergence.

    Notes
    -----
    Discrete pi: ``log Z(x) = logsumexp_i(log w_i + phi(x).phi(y_i)/tau)``, exact.

    Continuous pi: ``log Z = 1/tau + log sum_j w_j E_j exp(-|phi(x) - phi(y)|^2 / (2 tau))``,
    the 1/tau taken out so that nothing of size 1/tau cancels; each (x, j) integral uses a rule
    centred at the peak of its integrand (how it is found: docs/design.md,
    "simkit.exact.quadrature: log_partition"). The closed form for phi = identity is its test.
    """
    pi = check_pi(pi)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    tol = _check_tol(tol)
    if phi is not None:
        _check_callable("phi", phi)
    xs = check_unit_vectors("x", x, pi.dim)
    shape = xs.shape[:-1]
    xs = xs.reshape(-1, pi.dim)
    if xs.shape[0] == 0:
        return np.empty(shape)
    embed = (lambda y: y) if phi is None else (lambda y: _eval_embedding(phi, y))

    if isinstance(pi, Discrete):
        fx, fy = embed(xs), embed(pi.points)
        with np.errstate(divide="ignore"):
            logw = np.log(pi.weights)
        out = np.empty(xs.shape[0])
        step = max(1, (1 << 22) // max(1, pi.points.shape[0]))
        for lo in range(0, xs.shape[0], step):
            out[lo:lo + step] = logsumexp(logw + fx[lo:lo + step] @ fy.T / tau, axis=1)
        return out.reshape(shape)

    p = _check_continuous_dim(pi)
    max_nodes = _check_max_nodes(max_nodes, p)
    comps = _components(pi)
    anchor, comp, poles, conc = _problem_set(pi, comps, xs.shape[0])
    fx = embed(xs)

    def logf(batch):
        # phi(x).phi(y)/tau - 1/tau, formed without cancellation
        if phi is None:
            gap = _one_minus_dot(xs[anchor[batch.idx]], batch)
        else:
            gap = 0.5 * np.sum((embed(batch.y) - fx[anchor[batch.idx]][:, None, :]) ** 2, axis=2)
        return _log_density(pi, comps, comp[batch.idx], batch) - gap / tau

    if comps is not None:
        # peak of the component integrand for phi = identity (exact), a starting guess otherwise
        v = comps.kappas[comp][:, None] * comps.mus[comp] + xs[anchor] / tau
        k_id = np.linalg.norm(v, axis=1)
        nz = k_id > 0
        poles[nz] = v[nz] / k_id[nz, None]
        conc = k_id
    if phi is not None or comps is None:
        # choose the best start among nu, x and mu_j, then move to the integrand's mean direction
        cands = np.stack([poles, xs[anchor], comps.mus[comp] if comps is not None else poles], axis=1)
        b, c, _ = cands.shape
        vals = logf(_Batch(np.arange(b), poles, cands, None))
        poles = cands[np.arange(b), np.argmax(vals, axis=1)]
        conc = np.maximum(conc, 1.0 / tau)
        poles, conc = _moments_recentre(p, poles, conc, logf)
    m, S, _ = _integrate(p, poles, conc, logf, tol=tol, max_nodes=max_nodes)
    with np.errstate(divide="ignore"):
        logI = (m + np.log(S)).reshape(xs.shape[0], -1)
    return (1.0 / tau + logsumexp(logI, axis=1)).reshape(shape)
