"""Exact objects of docs/theory.md sections 2--4 for the embedding phi = identity (phi(x).phi(y) = x.y).

Per-anchor quantities (vectorised over anchors ``x`` of shape ``(n, d)``), all in log space:

* :func:`log_partition` -- ``log Z(x) = log E_{y~pi} exp(x.y / tau)``; with ``scale=2``, ``log Z2(x)``;
* :func:`log_m1` -- ``log m1(x) = log E_{x+~M(x)} exp(x.x+ / tau)``;
* :func:`mean_score` -- ``E[s(x, x+) | x]``;
* :func:`log_q` -- ``log q(x, y) = y.x / tau - log Z(x)``, the density of Q(x, .) w.r.t. pi;
* :func:`log_m` -- ``log m(x, y) = log dM(x, .)/dpi (y)``.

Population quantities (expectations over x ~ pi):

* :func:`cross_entropy` -- ``CE(M, Q) = -E s(x, x+) + E log Z(x)``;
* :func:`bias_constant` -- ``c1 = E[m1/Z - (Z2/Z^2 - 1)/2]`` of claim C1 (derived here);
* :func:`mutual_information` -- ``I(x; x+)`` for uniform pi and an isotropic kernel (then Q = M
  at tau = 1/kappa for the vMF kernel and CE = -I);
* :func:`gap_exact` -- the finite-k gap ``R_k - log k - CE`` itself, exactly, for uniform pi and an
  isotropic kernel (a Laplace-transform identity; independent of the C1 expansion).

Expectations over x are exact (closed form or adaptive 1-D quadrature, ~1e-12) where pi is uniform
or a single vMF and the integrand depends on x only through mu.x; otherwise they are Monte Carlo
over x (stratified by mixture component) with exact inner terms, and the functions return a
``(value, mcse)`` pair instead of a float.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import integrate
from scipy.special import logsumexp

from simkit._jit.special import log_sphere_area, log_vmf_norm, mean_resultant_length
from simkit._checks import check_int, check_points, check_rng, check_scalar
from simkit.distributions.heat import BrownianKernel
from simkit.distributions.kernels import GeodesicRandomWalk, MarkovKernel, RotatedVMFKernel, VMFKernel
from simkit.exact.quadrature import _gauss_legendre
from simkit.distributions.sphere import Discrete, SphereDistribution, Uniform, VMFMixture, VonMisesFisher

__all__ = [
    "log_partition",
    "log_m1",
    "mean_score",
    "log_q",
    "log_m",
    "cross_entropy",
    "bias_constant",
    "mutual_information",
    "gap_exact",
    "expansion_scales",
    "expectation",
    "Estimate",
    "DEFAULT_MC_SIZE",
]

#: size of the Monte Carlo over x used where no 1-D reduction exists (its rng is the caller's)
DEFAULT_MC_SIZE = 1 << 18


@dataclass(frozen=True)
class Estimate:
    """A Monte Carlo estimate with its Monte Carlo standard error (iterable as (value, mcse))."""

    value: float
    mcse: float

    def __iter__(self):
        yield self.value
        yield self.mcse


# ----------------------------------------------------------------------------------------------
# validation helpers

def check_pi(pi) -> SphereDistribution:
    if not isinstance(pi, SphereDistribution):
        raise ValueError(f"'pi' must be a simkit sphere distribution (Uniform, VonMisesFisher, VMFMixture, "
                         f"Discrete), got {type(pi).__name__}")
    return pi


def check_kernel(kernel) -> MarkovKernel:
    if not isinstance(kernel, MarkovKernel):
        raise ValueError(f"'kernel' must be a simkit Markov kernel (VMFKernel, RotatedVMFKernel, "
                         f"BrownianKernel, GeodesicRandomWalk), got {type(kernel).__name__}")
    return kernel


def check_tau(tau) -> float:
    return check_scalar("tau", tau, low=0.0, low_inclusive=False)


def unit_anchors(x, d: int) -> NDArray[np.float64]:
    x = check_points("x", x, d)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True))


def _check_compatible(pi, kernel) -> None:
    if isinstance(kernel, RotatedVMFKernel) and kernel.dim != pi.dim:
        raise ValueError(f"'kernel' has dimension {kernel.dim} but 'pi' has dimension {pi.dim}")


# ----------------------------------------------------------------------------------------------
# per-anchor quantities

def _log_partition(pi: SphereDistribution, x: NDArray, tau: float, scale: float = 1.0) -> NDArray:
    a = scale / tau
    if isinstance(pi, Discrete):
        with np.errstate(divide="ignore"):  # zero-weight atoms contribute nothing
            return logsumexp(np.log(pi.weights) + a * (x @ pi.points.T), axis=-1)
    w, mus, kappas = pi.as_mixture()
    d = pi.dim
    # ||kappa_j mu_j + a x||^2 = kappa_j^2 + a^2 + 2 a kappa_j mu_j.x, formed without cancellation
    dots = x @ mus.T  # (..., m)
    r2 = kappas**2 + a * a + 2.0 * a * kappas * dots
    r = np.sqrt(np.maximum(r2, 0.0))
    with np.errstate(divide="ignore"):  # zero-weight components contribute nothing
        terms = np.log(w) + log_vmf_norm(d, kappas) - log_vmf_norm(d, r)
        return logsumexp(terms, axis=-1)


def log_partition(pi: SphereDistribution, x: ArrayLike, tau: float, *, scale: float = 1.0) -> NDArray[np.float64]:
    """``log E_{y~pi} exp(scale x.y / tau)``: ``log Z(x)`` (scale 1) or ``log Z2(x)`` (scale 2).

    Parameters
    ----------
    pi : SphereDistribution
        A vMF mixture (Uniform, VonMisesFisher, VMFMixture) or a Discrete distribution.
    x : array_like, shape (..., d)
        Anchors (unit vectors).
    tau : float
        Temperature > 0.
    scale : float
        Multiplier of the score (2 gives Z2).

    Notes
    -----
    ``Z(x) = sum_j w_j C_d(kappa_j) / C_d(||kappa_j mu_j + x/tau||)`` (docs/theory.md section 4); exact
    for Discrete pi as a finite sum. For a general embedding use :mod:`simkit.exact.quadrature`.
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    scale = check_scalar("scale", scale, low=0.0, low_inclusive=False)
    return _log_partition(pi, unit_anchors(x, pi.dim), tau, scale)


def _log_m1(kernel: MarkovKernel, x: NDArray, tau: float) -> NDArray | None:
    """log m1(x) where exact; None where the kernel has no closed form (then use Monte Carlo)."""
    d = x.shape[-1]
    a = 1.0 / tau
    if isinstance(kernel, VMFKernel):
        val = float(log_vmf_norm(d, kernel.kappa) - log_vmf_norm(d, kernel.kappa + a))
        return np.full(x.shape[:-1], val)
    if isinstance(kernel, RotatedVMFKernel):
        k = kernel.kappa
        c = np.sum(x * (x @ kernel.rotation.T), axis=-1)  # x . R x
        r = np.sqrt(np.maximum(k * k + a * a + 2.0 * a * k * c, 0.0))
        return log_vmf_norm(d, k) - log_vmf_norm(d, r)
    if isinstance(kernel, BrownianKernel):
        return np.full(x.shape[:-1], float(kernel.log_mgf_cosine(a, d)))
    return None


def log_m1(kernel: MarkovKernel, x: ArrayLike, tau: float) -> NDArray[np.float64]:
    """``log m1(x) = log E_{x+~M(x)} exp(x.x+ / tau)`` (docs/theory.md claim C1).

    Exact for VMFKernel (``C_d(kappa)/C_d(kappa + 1/tau)``), RotatedVMFKernel
    (``C_d(kappa)/C_d(||kappa R x + x/tau||)``) and BrownianKernel (Funk--Hecke series).
    """
    kernel = check_kernel(kernel)
    tau = check_tau(tau)
    x = check_points("x", x, getattr(kernel, "dim", None))
    x = x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    out = _log_m1(kernel, x, tau)
    if out is None:
        raise NotImplementedError(f"no closed form of m1 for {type(kernel).__name__}")
    return out


def _mean_cosine(kernel: MarkovKernel, x: NDArray) -> NDArray:
    d = x.shape[-1]
    if isinstance(kernel, RotatedVMFKernel):
        return float(mean_resultant_length(d, kernel.kappa)) * np.sum(x * (x @ kernel.rotation.T), axis=-1)
    return np.full(x.shape[:-1], kernel.mean_cosine(d))


def mean_score(kernel: MarkovKernel, x: ArrayLike, tau: float) -> NDArray[np.float64]:
    """``E[s(x, x+) | x] = E[x.x+ | x] / tau`` (exact for every kernel in simkit)."""
    kernel = check_kernel(kernel)
    tau = check_tau(tau)
    x = check_points("x", x, getattr(kernel, "dim", None))
    return _mean_cosine(kernel, x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True))) / tau


def log_q(pi: SphereDistribution, x: ArrayLike, y: ArrayLike, tau: float) -> NDArray[np.float64]:
    """``log q(x, y) = x.y / tau - log Z(x)``: log density of Q(x, .) w.r.t. pi."""
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    y = check_points("y", y, pi.dim)
    return np.sum(x * y, axis=-1) / tau - _log_partition(pi, x, tau)


def log_m(pi: SphereDistribution, kernel: MarkovKernel, x: ArrayLike, y: ArrayLike) -> NDArray[np.float64]:
    """``log m(x, y) = log M(x, dy) / pi(dy)`` for a continuous pi and a kernel with a density."""
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    if isinstance(pi, Discrete):
        raise ValueError("'pi' must have a density: M(x, .) is not absolutely continuous w.r.t. a Discrete pi")
    x = unit_anchors(x, pi.dim)
    y = check_points("y", y, pi.dim)
    return kernel.logpdf(x, y) - pi.logpdf(y)


# ----------------------------------------------------------------------------------------------
# expectations over x

def _vmf_angle_expect(d: int, kappa: float, h) -> float:
    """``E h(theta)`` for theta = arccos(mu.x), x ~ vMF(mu, kappa) on S^{d-1}; h vectorised.

    The density of theta is ``C_d(kappa) |S^{d-2}| sin^{d-2}(theta) exp(kappa cos theta)``. Composite
    Gauss--Legendre (24 nodes a panel) on panels of half the peak's width within 40 widths of the
    mode, coarser panels outside; normalised by the rule's own mass. Accurate to ~1e-13 for
    0 <= kappa <= 1e6 and d <= 4096 (tests/exact/test_exact.py), with no adaptive loop.
    """
    log_c = float(log_vmf_norm(d, kappa) + log_sphere_area(d - 1))
    # mode of sin^{d-2} e^{kappa cos}: kappa c^2 + (d-2) c - kappa = 0
    if kappa > 0:
        c = 2.0 * kappa / ((d - 2) + np.sqrt((d - 2) ** 2 + 4.0 * kappa**2))
        mode = float(np.arccos(min(1.0, c)))
        # curvature of the log density at the mode sets the scale of the peak
        curv = kappa * np.cos(mode) + ((d - 2) / max(np.sin(mode), 1e-300) ** 2 if d > 2 else 0.0)
        width = min(np.pi, 1.0 / np.sqrt(max(curv, 1e-300)))
    else:
        mode, width = np.pi / 2, np.pi
    lo, hi = max(0.0, mode - 40.0 * width), min(np.pi, mode + 40.0 * width)
    core = np.linspace(lo, hi, max(2, int(np.ceil((hi - lo) / (0.5 * width))) + 1))
    edges = np.unique(np.concatenate([np.linspace(0.0, lo, 9), core, np.linspace(hi, np.pi, 9)]))
    x, w = _leggauss(24)
    a_, b_ = edges[:-1, None], edges[1:, None]
    theta = (0.5 * (b_ - a_) * x + 0.5 * (b_ + a_)).ravel()
    wt = (0.5 * (b_ - a_) * w).ravel()
    with np.errstate(divide="ignore"):
        lg = log_c + kappa * np.cos(theta) + ((d - 2) * np.log(np.sin(theta)) if d > 2 else 0.0)
    dens = wt * np.exp(lg)
    return float(np.sum(dens * h(theta)) / np.sum(dens))


def _single_vmf(pi: SphereDistribution) -> bool:
    return isinstance(pi, (Uniform, VonMisesFisher)) or (isinstance(pi, VMFMixture) and len(pi.weights) == 1)


def _expect_x(pi: SphereDistribution, h, *, isotropic: bool, n_mc: int, rng) -> float | Estimate:
    """E_{x~pi} h(x) for vectorised h.

    Exact where possible: a finite sum for Discrete pi; 1-D quadrature over mu.x when pi is a
    single vMF (or uniform) and ``isotropic`` says h depends on x only through mu.x. Otherwise
    Monte Carlo over x stratified by mixture component (proportional allocation): an Estimate.
    """
    d = pi.dim
    if isinstance(pi, Discrete):
        return float(np.sum(pi.weights * h(pi.points)))
    if isotropic and _single_vmf(pi):
        w, mus, kappas = pi.as_mixture()
        mu, kappa = mus[0], float(kappas[0])
        # an orthonormal partner of mu to build points with a given mu.x
        e = np.zeros(d)
        e[np.argmin(np.abs(mu))] = 1.0
        perp = e - (e @ mu) * mu
        perp /= np.linalg.norm(perp)

        def h_theta(theta):
            # points at angle theta from mu, built from (cos, sin) to keep precision near the pole
            return h(np.cos(theta)[:, None] * mu + np.sin(theta)[:, None] * perp)

        if kappa == 0.0:
            return float(h_theta(np.array([1.2]))[0])  # uniform pi: h is constant
        return _vmf_angle_expect(d, kappa, h_theta)
    # stratified Monte Carlo over the mixture components, proportional allocation
    rng = _mc_rng(rng)
    w, mus, kappas = pi.as_mixture()
    mean = 0.0
    var = 0.0
    for j in range(len(w)):
        nj = max(2, int(round(n_mc * w[j])))
        xj = VonMisesFisher(mus[j], kappas[j]).rvs(nj, rng=rng)
        hj = h(xj)
        mean += w[j] * hj.mean()
        var += w[j] ** 2 * hj.var(ddof=1) / nj
    return Estimate(float(mean), float(np.sqrt(var)))


def _mc_rng(rng) -> np.random.Generator:
    """The generator of a Monte Carlo integral: required (no hidden default seed), so that its error
    varies with the caller's seed (a study passes its task's ``rng``)."""
    if rng is None:
        raise ValueError("'rng' is required: this quantity needs Monte Carlo over x (no closed form for this "
                         "pi and kernel); pass a seed or a numpy Generator, e.g. the study task's rng")
    return check_rng(rng)


def expectation(pi: SphereDistribution, h, *, isotropic: bool = False, n_mc: int = DEFAULT_MC_SIZE,
                rng=None) -> float | Estimate:
    """``E_{x~pi} h(x)`` for a vectorised ``h`` ((n, d) points -> (n,) values).

    Exact where possible — a finite sum for Discrete pi; 1-D quadrature over mu.x for a single vMF
    (or uniform) pi when ``isotropic`` says h depends on x only through mu.x — and an
    :class:`Estimate` from Monte Carlo over x otherwise (stratified by mixture component; ``rng``
    required, no default seed).
    """
    pi = check_pi(pi)
    if not callable(h):
        raise ValueError(f"'h' must be a callable of (n, d) points, got {type(h).__name__}")
    return _expect_x(pi, h, isotropic=bool(isotropic), n_mc=check_int("n_mc", n_mc, low=2), rng=rng)


def _e_mean_cosine(pi: SphereDistribution, kernel: MarkovKernel) -> float:
    """E_{x~pi} E[x.x+ | x], exact for every simkit kernel and every pi."""
    d = pi.dim
    if isinstance(kernel, RotatedVMFKernel):
        # E[x.Rx] = tr(R E[x x^T]); for vMF(mu, k): E[x x^T] = (A/k) I + (1 - d A/k) mu mu^T
        if isinstance(pi, Discrete):
            second = (pi.points * pi.weights[:, None]).T @ pi.points
        else:
            w, mus, kappas = pi.as_mixture()
            second = np.zeros((d, d))
            for wj, mu, k in zip(w, mus, kappas):
                ak = 1.0 / d if k < 1e-8 else float(mean_resultant_length(d, k)) / k
                second += wj * (ak * np.eye(d) + (1.0 - d * ak) * np.outer(mu, mu))
        return float(mean_resultant_length(d, kernel.kappa)) * float(np.trace(kernel.rotation @ second))
    return float(kernel.mean_cosine(d))


def _setup(pi, kernel, tau):
    pi = check_pi(pi)
    kernel = check_kernel(kernel)
    tau = check_tau(tau)
    _check_compatible(pi, kernel)
    return pi, kernel, tau


def cross_entropy(pi: SphereDistribution, kernel: MarkovKernel, tau: float, *,
                  n_mc: int = DEFAULT_MC_SIZE, rng=None) -> float | Estimate:
    """``CE(M, Q) = -E s(x, x+) + E log Z(x)`` for phi = identity (docs/theory.md section 2).

    Returns a float where exact (uniform or single-vMF pi, Discrete pi; any simkit kernel, since
    ``E s(x, x+)`` is closed-form for all of them) and an :class:`Estimate` (value, mcse) where
    ``E log Z`` needs Monte Carlo over x (vMF mixtures with two or more components).
    """
    pi, kernel, tau = _setup(pi, kernel, tau)
    n_mc = check_int("n_mc", n_mc, low=2)
    e_s = _e_mean_cosine(pi, kernel) / tau
    e_logz = _expect_x(pi, lambda x: _log_partition(pi, x, tau), isotropic=True, n_mc=n_mc, rng=rng)
    if isinstance(e_logz, Estimate):
        return Estimate(e_logz.value - e_s, e_logz.mcse)
    return e_logz - e_s


def bias_constant(pi: SphereDistribution, kernel: MarkovKernel, tau: float, *,
                  n_mc: int = DEFAULT_MC_SIZE, rng=None) -> float | Estimate:
    """The 1/k constant of claim C1: ``c1 = E_x[ m1(x)/Z(x) - (Z2(x)/Z(x)^2 - 1)/2 ]``.

    Exact (float) for uniform or single-vMF pi with an isotropic kernel with closed-form m1
    (VMFKernel, BrownianKernel), and for Discrete pi with those kernels; otherwise an
    :class:`Estimate` from Monte Carlo over x with exact inner terms (m1 by Monte Carlo over x+
    too when the kernel has no closed form, e.g. GeodesicRandomWalk).

    Notes
    -----
    Derived here by the second-order delta method (docs/theory.md C1): ``gap_k = c1/k + O(1/k^2)``.
    """
    pi, kernel, tau = _setup(pi, kernel, tau)
    n_mc = check_int("n_mc", n_mc, low=2)
    d = pi.dim

    def ratio_terms(x):
        lz = _log_partition(pi, x, tau)
        lz2 = _log_partition(pi, x, tau, 2.0)
        return -0.5 * np.expm1(lz2 - 2.0 * lz)

    probe = _log_m1(kernel, np.eye(d)[:1], tau)
    if probe is not None:
        def h(x):
            return np.exp(_log_m1(kernel, x, tau) - _log_partition(pi, x, tau)) + ratio_terms(x)
        return _expect_x(pi, h, isotropic=kernel.isotropic, n_mc=n_mc, rng=rng)
    # no closed-form m1: joint Monte Carlo over (x, x+)
    rng = _mc_rng(rng)
    x = pi.rvs(n_mc, rng=rng)
    xp = kernel.sample(x, rng=rng)
    vals = np.exp(np.sum(x * xp, axis=1) / tau - _log_partition(pi, x, tau)) + ratio_terms(x)
    return Estimate(float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(n_mc)))


def expansion_scales(pi: SphereDistribution, kernel: MarkovKernel, tau: float, *,
                     n_mc: int = DEFAULT_MC_SIZE, rng=None) -> tuple[float, float]:
    """``(E_x[Z2/Z^2], E_x[m1/Z])``: the scales of the delta-method expansion of gap_k.

    gap_k expands in powers of these over k (the relative variance of e^{s}/Z is Z2/Z^2 - 1 and the
    positive's weight is e^{s0}/(kZ)), so the O(1/k^2) term is small once k is well above both.
    Values only (Monte Carlo estimates are returned without their MCSE: they set a fit range).
    """
    pi, kernel, tau = _setup(pi, kernel, tau)

    def ratio(x):
        return np.exp(_log_partition(pi, x, tau, 2.0) - 2.0 * _log_partition(pi, x, tau))

    rho = _expect_x(pi, ratio, isotropic=True, n_mc=n_mc, rng=rng)
    probe = _log_m1(kernel, np.eye(pi.dim)[:1], tau)
    if probe is not None:
        mbar = _expect_x(pi, lambda x: np.exp(_log_m1(kernel, x, tau) - _log_partition(pi, x, tau)),
                         isotropic=kernel.isotropic, n_mc=n_mc, rng=rng)
    else:
        r = _mc_rng(rng)
        x = pi.rvs(n_mc, rng=r)
        xp = kernel.sample(x, rng=r)
        mbar = float(np.mean(np.exp(np.sum(x * xp, axis=1) / tau - _log_partition(pi, x, tau))))
    return float(rho.value if isinstance(rho, Estimate) else rho), float(mbar.value if isinstance(mbar, Estimate) else mbar)


def mutual_information(kernel: MarkovKernel, dim: int) -> float:
    """``I(x; x+)`` for x uniform on S^{dim-1} and an isotropic kernel with a density.

    VMFKernel: ``log C_d(kappa) - log C_d(0) + kappa A_d(kappa)`` (docs/theory.md section 4); with
    tau = 1/kappa, Q = M and ``CE = -I``. BrownianKernel: ``E log h_t(x.x+)`` by quadrature.
    """
    kernel = check_kernel(kernel)
    d = check_int("dim", dim, low=2)
    if isinstance(kernel, VMFKernel):
        k = kernel.kappa
        return float(log_vmf_norm(d, k) - log_vmf_norm(d, 0.0) + k * mean_resultant_length(d, k))
    if isinstance(kernel, BrownianKernel):
        lo = float(log_sphere_area(d))

        def integrand(w):
            p = kernel.pdf_cosine(np.atleast_1d(w), d)
            lp = kernel.logpdf(np.array([[1.0] + [0.0] * (d - 1)]),
                               np.array([[w] + [np.sqrt(max(0.0, 1 - w * w))] + [0.0] * (d - 2)]))
            return float(p[0] * (lp[0] + lo))

        return float(integrate.quad(integrand, -1.0, 1.0, epsabs=0.0, epsrel=1e-12, limit=400)[0])
    raise NotImplementedError(f"mutual information is implemented for VMFKernel and BrownianKernel, "
                              f"not {type(kernel).__name__}")


# ----------------------------------------------------------------------------------------------
# the exact finite-k gap (uniform pi, isotropic kernel)

def _leggauss(n: int) -> tuple[NDArray, NDArray]:
    rule = _gauss_legendre(n)  # accurate to ~1e-14 where numpy's and scipy's are not (n ~ 1e3)
    return rule.x, rule.w


def _cosine_law_rule(d: int, n: int, log_weight_fn) -> tuple[NDArray, NDArray]:
    """Gauss--Legendre rule in theta on [0, pi] for E f(cos theta) under a given log density of theta."""
    nodes, weights = _leggauss(n)
    theta = 0.5 * np.pi * (nodes + 1.0)
    lw = np.log(0.5 * np.pi * weights) + log_weight_fn(theta)
    lw -= logsumexp(lw)  # normalise exactly
    return np.cos(theta), lw


def _log_laplace(t: NDArray, e: NDArray, log_p: NDArray) -> NDArray:
    """``log E exp(-t X)`` for X with atoms ``e`` and log weights ``log_p``, stable for all t >= 0.

    Small t: ``log1p(-(1 - L))`` with ``1 - L = E[-expm1(-t X)]`` (no cancellation); large t, where
    L underflows: ``logsumexp(log_p - t e)``.
    """
    arg = np.outer(t, e)
    one_minus = -(np.expm1(-arg) @ np.exp(log_p))
    out = np.empty(t.shape)
    small = one_minus < 0.5
    out[small] = np.log1p(-one_minus[small])
    out[~small] = logsumexp(log_p[None, :] - arg[~small], axis=1)
    return out


def gap_exact(kernel: MarkovKernel, dim: int, tau: float, k: ArrayLike, *, n_nodes: int = 1000,
              n_outer: int = 2000) -> NDArray[np.float64]:
    """The finite-k gap ``R_k - log k - CE`` exactly, for x uniform on S^{dim-1}, phi = identity and an
    isotropic kernel (VMFKernel or BrownianKernel).

    Notes
    -----
    With Z constant, ``gap_k = E log Y`` for ``Y = (e^{s0} + sum_{i<=k} e^{s_i}) / (k Z)``, and
    ``E log Y = int_0^inf (e^{-u} - E e^{-u Y}) du / u`` (Frullani). Independence gives
    ``E e^{-uY} = L0(u/(kZ)) L(u/(kZ))^k`` with the Laplace transforms of e^{s0} and of e^{s}, each
    a 1-D integral over the law of a cosine. This is a check of the estimator and of the C1
    constant that does not use the delta-method expansion. Accuracy ~1e-12 absolute (tested by
    halving both rules and against direct summation for small k).
    """
    kernel = check_kernel(kernel)
    d = check_int("dim", dim, low=2)
    tau = check_tau(tau)
    ks = np.atleast_1d(np.asarray(k))
    if (ks.ndim != 1 or ks.size == 0 or ks.dtype.kind not in "iuf" or not np.all(np.isfinite(ks))
            or np.any(ks < 1) or np.any(ks != np.round(ks))):
        raise ValueError(f"'k' must be integers >= 1, got {k!r}")
    if not kernel.isotropic or isinstance(kernel, GeodesicRandomWalk):
        raise ValueError("'kernel' must be VMFKernel or BrownianKernel for gap_exact")
    a = 1.0 / tau
    log_unif = lambda th: (d - 2) * np.log(np.maximum(np.sin(th), 1e-300))  # noqa: E731
    w_neg, lw_neg = _cosine_law_rule(d, n_nodes, log_unif)
    if isinstance(kernel, VMFKernel):
        w_pos, lw_pos = _cosine_law_rule(d, n_nodes, lambda th: log_unif(th) + kernel.kappa * np.cos(th))
    elif isinstance(kernel, BrownianKernel):
        w_pos, lw_pos = _cosine_law_rule(
            d, n_nodes, lambda th: np.log(np.maximum(kernel.pdf_cosine(np.cos(th), d) * np.sin(th), 1e-300)))
    else:
        raise ValueError("'kernel' must be VMFKernel or BrownianKernel for gap_exact")
    log_z = logsumexp(lw_neg + a * w_neg)
    e_neg = np.exp(a * w_neg - log_z)  # e^{s}/Z at the nodes
    e_pos = np.exp(a * w_pos - log_z)
    # With t = u/k: E log Y = int_0^inf (e^{-k t} - L0(t) L(t)^k) dt / t, so the Laplace transforms
    # are needed on one grid of t for every k. Gauss-Legendre in v = log t over [-48, 2/tau + 24]
    # (the integrand is smooth in v and negligible outside for k <= 2^24).
    vn, vw = _leggauss(n_outer)
    # E e^{-uY} decays only once u exceeds 1/Y for the smallest Y ~ e^{-2/tau}: the range must reach it
    lo, hi = -48.0, 2.0 * a + 24.0
    v = 0.5 * (hi - lo) * vn + 0.5 * (hi + lo)
    vw = 0.5 * (hi - lo) * vw
    t = np.exp(v)
    log_l = _log_laplace(t, e_neg, lw_neg)
    log_l0 = _log_laplace(t, e_pos, lw_pos)
    out = np.empty(ks.shape)
    for i, kk in enumerate(ks.astype(float)):
        a_exp = -kk * t  # log e^{-u}
        b_exp = kk * log_l + log_l0  # log E e^{-uY}
        # e^a - e^b written around the larger exponent, without cancellation or overflow
        hi_exp = np.maximum(a_exp, b_exp)
        with np.errstate(over="ignore"):  # np.where evaluates the unused branch too
            integrand = np.where(a_exp >= b_exp, -np.expm1(b_exp - a_exp),
                                 np.expm1(a_exp - b_exp)) * np.exp(hi_exp)
        out[i] = float(np.sum(vw * integrand))
    return out
