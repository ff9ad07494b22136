"""Special functions for the von Mises--Fisher family, in log space.

Everything here is vectorised NumPy and stable for dimensions ``d`` up to (at least) 4096 and
concentrations ``kappa`` from 0 to 1e6 (docs/theory.md section 4):

* :func:`log_bessel_iv` -- ``log I_nu(x)`` without overflow or underflow,
* :func:`log_vmf_norm` -- ``log C_d(kappa)``, the vMF normaliser w.r.t. surface measure,
* :func:`mean_resultant_length` -- ``A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa)``,
* :func:`log_vmf_mgf` -- ``log E exp(v . y)`` for ``y ~ vMF(mu, kappa)``,
* :func:`log_sphere_area` -- ``log |S^{d-1}|``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import gammaln, ive

__all__ = [
    "log_bessel_iv",
    "log_vmf_norm",
    "mean_resultant_length",
    "log_vmf_mgf",
    "log_sphere_area",
    "log_vmf_norm_shifted",
]

_LOG_2PI = float(np.log(2.0 * np.pi))
# ive(nu, x) = exp(-x) I_nu(x) is accurate to ~1e-15 (checked against mpmath) wherever it does
# not underflow; below this value we switch to a series or to Debye's expansion.
_IVE_SAFE = 1e-280


def _debye_polynomials(n_terms: int) -> list[NDArray[np.float64]]:
    """Coefficients (ascending powers of t) of Debye's polynomials u_0 .. u_{n_terms-1}.

    Generated exactly with rational arithmetic from the recurrence (DLMF 10.41.10)
    ``u_{k+1}(t) = t^2 (1 - t^2) u_k'(t) / 2 + (1/8) int_0^t (1 - 5 s^2) u_k(s) ds``.
    """
    polys = [[Fraction(1)]]
    for _ in range(n_terms - 1):
        u = polys[-1]
        deg = len(u) - 1
        out = [Fraction(0)] * (deg + 4)
        # t^2 (1 - t^2) u'(t) / 2
        for j in range(1, deg + 1):
            c = u[j] * j / 2
            out[j + 1] += c
            out[j + 3] -= c
        # (1/8) int_0^t (1 - 5 s^2) u(s) ds
        for j in range(deg + 1):
            out[j + 1] += u[j] / (8 * (j + 1))
            out[j + 3] -= 5 * u[j] / (8 * (j + 3))
        while len(out) > 1 and out[-1] == 0:
            out.pop()
        polys.append(out)
    return [np.array([float(c) for c in p]) for p in polys]


_DEBYE = _debye_polynomials(8)


def _log_iv_debye(nu: NDArray, x: NDArray) -> NDArray:
    """Debye's uniform asymptotic expansion of log I_nu(x) (DLMF 10.41.3), 8 terms.

    Used only where ``ive`` underflows with ``x > 2 sqrt(10 (nu + 1))``, which forces nu > ~300;
    there the truncation error is below 1e-20.
    """
    root = np.sqrt(nu * nu + x * x)
    t = nu / root
    # nu * eta = sqrt(nu^2 + x^2) + nu log(x / (nu + sqrt(nu^2 + x^2)))
    lead = root + nu * np.log(x / (nu + root)) - 0.5 * (_LOG_2PI + np.log(root))
    series = np.zeros_like(x)
    for k, coef in enumerate(_DEBYE):
        series += np.polynomial.polynomial.polyval(t, coef) / nu**k
    return lead + np.log(series)


def _log_iv_series(nu: NDArray, x: NDArray) -> NDArray:
    """Power series of log I_nu(x) for x^2/4 <= 10 (nu + 1), summed in log space."""
    q = 0.25 * x * x
    term = np.ones_like(x)
    total = np.ones_like(x)
    for m in range(1, 200):
        term = term * q / (m * (nu + m))
        total = total + term
        if np.all(term <= 1e-17 * total):
            break
    return nu * np.log(0.5 * x) - gammaln(nu + 1.0) + np.log(total)


def log_bessel_iv(nu: ArrayLike, x: ArrayLike) -> NDArray[np.float64]:
    """``log I_nu(x)`` for ``nu >= 0`` and ``x >= 0``, finite wherever ``I_nu(x) > 0``.

    Notes
    -----
    Three branches: ``log(ive(nu, x)) + x`` where scipy's exponentially scaled Bessel function
    does not underflow; otherwise the power series (small ``x`` relative to ``nu``) or Debye's
    uniform expansion (large ``nu``). ``log I_0(0) = 0`` and ``log I_nu(0) = -inf`` for nu > 0.
    """
    nu_b, x_b = np.broadcast_arrays(np.asarray(nu, dtype=float), np.asarray(x, dtype=float))
    nu_b = np.array(nu_b, dtype=float)
    x_b = np.array(x_b, dtype=float)
    out = np.empty(x_b.shape)
    with np.errstate(divide="ignore", under="ignore"):
        scaled = ive(nu_b, x_b)
    ok = scaled > _IVE_SAFE
    out[ok] = np.log(scaled[ok]) + x_b[ok]
    zero = x_b == 0.0
    out[zero] = np.where(nu_b[zero] == 0.0, 0.0, -np.inf)
    rest = ~ok & ~zero
    if np.any(rest):
        nr, xr = nu_b[rest], x_b[rest]
        use_series = 0.25 * xr * xr <= 10.0 * (nr + 1.0)
        vals = np.empty(xr.shape)
        if np.any(use_series):
            vals[use_series] = _log_iv_series(nr[use_series], xr[use_series])
        if np.any(~use_series):
            vals[~use_series] = _log_iv_debye(nr[~use_series], xr[~use_series])
        out[rest] = vals
    return out


def log_sphere_area(d: ArrayLike) -> NDArray[np.float64]:
    """``log |S^{d-1}| = log(2 pi^{d/2} / Gamma(d/2))``, the surface area of the unit sphere in R^d."""
    d = np.asarray(d, dtype=float)
    return np.log(2.0) + 0.5 * d * np.log(np.pi) - gammaln(0.5 * d)


def log_vmf_norm(d: ArrayLike, kappa: ArrayLike) -> NDArray[np.float64]:
    """``log C_d(kappa)``: the vMF density is ``C_d(kappa) exp(kappa mu.y)`` w.r.t. surface measure.

    ``C_d(kappa) = kappa^{d/2-1} / ((2 pi)^{d/2} I_{d/2-1}(kappa))`` and ``C_d(0) = 1/|S^{d-1}|``.

    Notes
    -----
    For ``kappa < 1e-8`` the ratio ``kappa^nu / I_nu(kappa)`` is evaluated by its series
    ``2^nu Gamma(nu+1) / (1 + kappa^2 / (4 (nu+1)) + ...)`` so the limit kappa -> 0 is continuous.
    """
    d_b, k_b = np.broadcast_arrays(np.asarray(d, dtype=float), np.asarray(kappa, dtype=float))
    d_b = np.array(d_b, dtype=float)
    k_b = np.array(k_b, dtype=float)
    nu = 0.5 * d_b - 1.0
    out = np.empty(k_b.shape)
    small = k_b < 1e-8
    if np.any(small):
        ks, ns = k_b[small], nu[small]
        # log(kappa^nu / I_nu(kappa)) = log(2^nu Gamma(nu + 1)) - log1p(kappa^2 / (4 (nu + 1)) + ...)
        out[small] = (ns * np.log(2.0) + gammaln(ns + 1.0) - np.log1p(0.25 * ks * ks / (ns + 1.0))
                      - 0.5 * d_b[small] * _LOG_2PI)
    big = ~small
    if np.any(big):
        kb, nb = k_b[big], nu[big]
        out[big] = nb * np.log(kb) - 0.5 * d_b[big] * _LOG_2PI - log_bessel_iv(nb, kb)
    return out


def _bessel_ratio_cf(nu: NDArray, x: NDArray) -> NDArray:
    """``I_{nu+1}(x) / I_nu(x)`` by its continued fraction (modified Lentz), for x > 0.

    ``r = 1 / (b_1 + 1 / (b_2 + ...))`` with ``b_n = 2 (nu + n) / x``; used where ive underflows,
    i.e. x small relative to nu, where it converges in a few dozen terms.
    """
    tiny = 1e-300
    f = np.full(x.shape, tiny)
    c = f.copy()
    dd = np.zeros(x.shape)
    for n in range(1, 100000):
        b = 2.0 * (nu + n) / x
        dd = b + dd
        dd = np.where(dd == 0.0, tiny, dd)
        c = b + 1.0 / c
        c = np.where(c == 0.0, tiny, c)
        dd = 1.0 / dd
        delta = c * dd
        f = f * delta
        if np.all(np.abs(delta - 1.0) < 1e-16):
            break
    return f


def log_vmf_norm_shifted(d: ArrayLike, kappa: ArrayLike) -> NDArray[np.float64]:
    """``log C_d(kappa) + kappa``, the log vMF density at the mode, without cancellation.

    With ``log I_nu(kappa) = log ive(nu, kappa) + kappa`` the ``kappa`` cancels analytically, so the
    log density ``(log C_d + kappa) - kappa (1 - mu.x)`` keeps full relative precision near the mode
    even for kappa = 1e6 (where ``log C_d`` and ``kappa mu.x`` are each ~1e6).
    """
    d_b, k_b = np.broadcast_arrays(np.asarray(d, dtype=float), np.asarray(kappa, dtype=float))
    d_b = np.array(d_b, dtype=float)
    k_b = np.array(k_b, dtype=float)
    nu = 0.5 * d_b - 1.0
    out = np.array(log_vmf_norm(d_b, k_b) + k_b, dtype=float)
    with np.errstate(divide="ignore", under="ignore"):
        scaled = ive(nu, k_b)
    ok = (scaled > _IVE_SAFE) & (k_b >= 1e-8)
    out[ok] = nu[ok] * np.log(k_b[ok]) - 0.5 * d_b[ok] * _LOG_2PI - np.log(scaled[ok])
    return out


def mean_resultant_length(d: ArrayLike, kappa: ArrayLike) -> NDArray[np.float64]:
    """``A_d(kappa) = E[mu . y] = I_{d/2}(kappa) / I_{d/2-1}(kappa)`` for ``y ~ vMF(mu, kappa)``.

    Notes
    -----
    Where both scaled Bessel functions are representable the ratio of ``ive`` values is used
    (no cancellation); otherwise the continued fraction of the Bessel ratio (no cancellation
    either), accurate to a few ulp. For ``kappa < 1e-6``, ``A_d(kappa) = kappa / d (1 - kappa^2 / (d (d + 2)) + ...)``.
    """
    d_b, k_b = np.broadcast_arrays(np.asarray(d, dtype=float), np.asarray(kappa, dtype=float))
    d_b = np.array(d_b, dtype=float)
    k_b = np.array(k_b, dtype=float)
    nu = 0.5 * d_b - 1.0
    out = np.empty(k_b.shape)
    small = k_b < 1e-6
    out[small] = k_b[small] / d_b[small] * (1.0 - k_b[small] ** 2 / (d_b[small] * (d_b[small] + 2.0)))
    big = ~small
    if np.any(big):
        kb, nb = k_b[big], nu[big]
        with np.errstate(divide="ignore", under="ignore", invalid="ignore"):
            num, den = ive(nb + 1.0, kb), ive(nb, kb)
        ok = (num > _IVE_SAFE) & (den > _IVE_SAFE)
        vals = np.empty(kb.shape)
        vals[ok] = num[ok] / den[ok]
        if np.any(~ok):
            vals[~ok] = _bessel_ratio_cf(nb[~ok], kb[~ok])
        out[big] = vals
    return out


def log_vmf_mgf(d: int, kappa: ArrayLike, kappa_mu_plus_v_norm: ArrayLike) -> NDArray[np.float64]:
    """``log E_{y ~ vMF(mu, kappa)} exp(v . y) = log C_d(kappa) - log C_d(||kappa mu + v||)``.

    The caller passes the norm ``||kappa mu + v||`` so that it can be formed stably for its case.
    """
    return log_vmf_norm(d, kappa) - log_vmf_norm(d, kappa_mu_plus_v_norm)
