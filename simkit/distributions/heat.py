"""Spherical Brownian motion on S^{d-1} (generator Laplacian/2) as a Markov kernel (docs/theory.md section 4).

:class:`BrownianKernel` ``(t)`` moves x to the position x+ of a Brownian motion started at x and run
for time t. Its law is rotation invariant, so everything reduces to the law of ``w = x . x+`` on
[-1, 1]: the density is the heat-kernel series ``h_t(w) = sum_l a_l P_l(w)`` (normalised
Gegenbauer ``P_l``), its CDF is summed term by term, and ``E[w] = exp(-(d - 1) t / 2)``.

The series coefficients are correctly rounded float64 values, summed with stable three-term
recurrences and compensated summation, with a certified rounding bound; a dimension whose series
would cancel (t small relative to d) is refused (:meth:`BrownianKernel.min_time`), and the far tail
of the density is re-summed exactly in integer arithmetic. Sampling inverts the CDF exactly
(Newton in the angle from a tabulated bracket) in Numba with the chunked streams of
:mod:`simkit._jit.rng`, so output is bit-identical for a given ``rng`` whatever the thread count.
The NumPy functions of this module are the reference for the jitted ones. Formulas (CDF series and
its derivation), error bounds and the sampler: docs/design.md, "simkit.distributions.heat".
"""

from __future__ import annotations

import functools
import math
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from typing import NamedTuple

import numpy as np
from numba import njit, prange
from numpy.typing import ArrayLike, NDArray
from scipy.special import betainc, gammaln, logsumexp, poch

from simkit._jit.rng import CHUNK, chunk_state, draw_key, uniform_pos
from simkit._jit.sampling import compose_at
from simkit._jit.special import log_bessel_iv, log_sphere_area
from simkit._checks import check_dim, check_scalar
from simkit.distributions.kernels import MarkovKernel

__all__ = ["BrownianKernel", "sample_heat"]

_EPS_SERIES = 2.0**-53   # unit roundoff; the series error is bounded by it times sum_l (l+1) |coef_l|
_CDF_ERR_MAX = 1e-10     # largest admissible absolute error bound of the CDF series
_TRUNC = 1e-17           # truncate where terms < _TRUNC * (running maximum) and decreasing
_MAX_TERMS = 20000       # longest admissible series (bounds memory and sampling cost)
_T_UNIFORM = 1e3         # beyond this t the l >= 1 terms are < e^{-500}: the kernel is uniform
_N_GRID = 1025           # angles of the sampler's bracketing table
_NEWTON_TOL = 1e-14      # target |F(cos theta) - u| of the inversion
_TAIL_FACTOR = 1e10      # density series with |sum| < _TAIL_FACTOR * bound are summed exactly
_EXACT_MAX_WORK = 1e6    # budget of the exact tail summation (a few seconds for one point)
_DEC_EXP_FLOOR = Decimal(10) ** 15  # exp(x) for x below -1e15 is 0 at any precision used here


# --------------------------------------------------------------------------------------------
# Coefficients, truncation and conditioning
# --------------------------------------------------------------------------------------------

def _log_coefficients(d: int, t: float, n_terms: int) -> tuple[NDArray, NDArray]:
    """``log a_l`` and ``log beta_l`` (``beta_0 = 0``) for l = 0 .. n_terms - 1, in float64.

    Accurate to ~1e-13 relative: enough for truncation and conditioning decisions, not for
    summation (:func:`_exact_coefficients` gives those).
    """
    lam = 0.5 * (d - 2)
    t = min(t, _T_UNIFORM)
    l = np.arange(n_terms, dtype=float)
    expo = -0.5 * t * l * (l + d - 2.0)
    k = l[1:]
    if lam > 0:
        log_c = np.concatenate(([0.0], np.cumsum(np.log1p((2.0 * lam - 1.0) / k))))  # log C^lam_l(1)
        log_n = np.log1p(l / lam) + log_c
    else:
        log_n = np.full(n_terms, np.log(2.0))
        log_n[0] = 0.0
    # log C^{lam+1}_{l-1}(1) for l >= 1: ratio (k + 2 lam + 1)/k from C_{k-1} to C_k
    log_c1 = np.concatenate(([0.0], np.cumsum(np.log1p((2.0 * lam + 1.0) / k[:-1]))))
    log_b = np.full(n_terms, -np.inf)
    log_b[1:] = expo[1:] + np.log(2.0 * (k + lam) / (k * (k + 2.0 * lam))) + log_c1
    return expo + log_n, log_b


def _truncation(log_terms: NDArray) -> int | None:
    """Number of terms kept: the first l >= 1 whose term is below ``_TRUNC`` times the largest
    earlier term and below its predecessor (the log terms are concave in l, so every later term
    is smaller still); None if no such l."""
    runmax = np.maximum.accumulate(log_terms)
    with np.errstate(invalid="ignore"):
        stop = (log_terms[1:] < log_terms[:-1]) & (log_terms[1:] < runmax[:-1] + math.log(_TRUNC))
    idx = np.flatnonzero(stop)
    return int(idx[0]) + 1 if idx.size else None


def _log_c(d: int) -> float:
    """``log c_d``, c_d = Gamma(d/2) / (sqrt(pi) Gamma((d-1)/2)): the uniform law of w is
    ``c_d (1 - w^2)^{(d-3)/2} dw``."""
    return float(gammaln(0.5 * d) - 0.5 * math.log(math.pi) - gammaln(0.5 * (d - 1)))


class _Plan(NamedTuple):
    n_terms: int | None       # series length, None if longer than _MAX_TERMS
    log_err_cdf: float        # log of the CDF rounding bound eps c_d sum (l+1) beta_l
    log_sum_a: float          # log sum_l a_l = log h_t(1)

    @property
    def admissible(self) -> bool:
        return self.n_terms is not None and self.log_err_cdf <= math.log(_CDF_ERR_MAX)


def _plan(d: int, t: float) -> _Plan:
    """Series length and conditioning of the kernel at time t on S^{d-1}."""
    log_a, log_b = _log_coefficients(d, t, _MAX_TERMS + 2)
    la, lb = _truncation(log_a), _truncation(log_b)
    n = None if la is None or lb is None else max(la, lb)
    m = n if n is not None else log_a.size
    weights = np.log1p(np.arange(m, dtype=float))  # log(l + 1): the recurrence error grows with l
    log_err = (math.log(_EPS_SERIES) + _log_c(d) + float(logsumexp(log_b[1:m] + weights[1:]))
               if m > 1 else -np.inf)
    return _Plan(n, log_err, float(logsumexp(log_a[:m])))


@functools.lru_cache(maxsize=None)
def _min_time(d: int) -> float:
    """Smallest admissible t on S^{d-1}, by bisection on log t, rounded up to 3 digits."""
    lo, hi = 1e-15, _T_UNIFORM  # inadmissible (series too long) and admissible for every d
    while hi / lo > 1.0 + 1e-6:
        mid = math.sqrt(lo * hi)
        if _plan(d, mid).admissible:
            hi = mid
        else:
            lo = mid
    unit = 10.0 ** (math.floor(math.log10(hi)) - 2)  # one in the third significant digit
    steps = math.ceil(hi / unit)
    while not _plan(d, float(f"{steps * unit:.3g}")).admissible:  # pragma: no cover - rounding guard
        steps += 1
    return float(f"{steps * unit:.3g}")


def _exp_decimal(x: Decimal) -> Decimal:
    return x.exp() if x > -_DEC_EXP_FLOOR else Decimal(0)


def _exact_coefficients(d: int, t: float, n_terms: int) -> tuple[NDArray, NDArray]:
    """``a_l`` and ``beta_l`` (``beta_0 = 0``), l < n_terms, each correctly rounded to float64.

    ``N_l = binom(l+d-1, d-1) - binom(l+d-3, d-1)`` and ``C^{lambda+1}_{l-1}(1) = binom(l+d-2, d-1)``
    are exact integers, so ``a_l = e_l N_l`` and
    ``beta_l = e_l (2 l + d - 2) binom(l+d-2, d-1) / (l (l + d - 2))`` with
    ``e_l = exp(-l (l + d - 2) t / 2)`` need only one decimal exponential each (40 digits).
    """
    tt = Decimal(min(t, _T_UNIFORM))  # exact
    a = np.empty(n_terms)
    b = np.zeros(n_terms)
    a[0] = 1.0
    with localcontext() as ctx:
        ctx.prec = 40
        ctx.Emax, ctx.Emin = MAX_EMAX, MIN_EMIN
        for l in range(1, n_terms):
            e = _exp_decimal(-tt * (l * (l + d - 2)) / 2)
            n_l = 2 if d == 2 else math.comb(l + d - 1, d - 1) - math.comb(l + d - 3, d - 1)
            a[l] = float(e * n_l)
            b[l] = float(e * ((2 * l + d - 2) * math.comb(l + d - 2, d - 1)) / (l * (l + d - 2)))
    return a, b


def _f0_coefficients(d: int) -> NDArray:
    """``1 / (n K_n)`` for n = n0 + 2, n0 + 4, ..., d - 2 (n0 = d mod 2), K_n = int_0^pi sin^n.

    With ``G_n(phi) = int_0^phi sin^n / K_n`` (the uniform law of the angle), integration by parts
    gives ``G_n = G_{n-2} - sin^{n-1}(phi) cos(phi) / (n K_n)``, from G_0 = phi/pi or
    G_1 = sin^2(phi/2). ``K_n = sqrt(pi) / poch(n/2 + 1/2, 1/2)``.
    """
    n = np.arange(d % 2 + 2, d - 1, 2, dtype=float)
    return poch(0.5 * n + 0.5, 0.5) / (n * math.sqrt(math.pi))


# --------------------------------------------------------------------------------------------
# Jitted series, CDF inversion and sampler
# --------------------------------------------------------------------------------------------

@njit(cache=True)
def _series(w, a, beta, lam):
    """``(h, S)``: ``h = sum_l a_l P_l(w)``, ``S = sum_{l>=1} beta_l Ct_{l-1}(w)``.

    Both sums are compensated (Neumaier), so their rounding error is that of the terms alone.
    """
    mu = lam + 1.0
    h = a[0]
    hc = 0.0
    s = 0.0
    sc = 0.0
    pm1 = 1.0   # P_{l-1}
    p = w       # P_l (l = 1; also for lam = 0, where the recurrence is 0/0 at l = 0)
    cm1 = 0.0   # Ct_{l-2}
    c = 1.0     # Ct_{l-1}
    for l in range(1, a.shape[0]):
        x = a[l] * p
        y = h + x
        hc += (h - y) + x if abs(h) >= abs(x) else (x - y) + h
        h = y
        x = beta[l] * c
        y = s + x
        sc += (s - y) + x if abs(s) >= abs(x) else (x - y) + s
        s = y
        pn = (2.0 * (l + lam) * w * p - l * pm1) / (l + 2.0 * lam)
        pm1 = p
        p = pn
        k = l - 1
        cn = (2.0 * (k + mu) * w * c - k * cm1) / (k + 2.0 * mu)
        cm1 = c
        c = cn
    return h + hc, s + sc


@njit(cache=True)
def _f0_theta(theta, d, q):
    """Uniform-law CDF of w at w = cos(theta): P(Theta >= theta), accurate to ~1e-16 absolute."""
    flip = theta > 0.5 * np.pi
    phi = np.pi - theta if flip else theta
    sn = np.sin(phi)
    cs = np.cos(phi)
    if d % 2 == 0:
        g = phi / np.pi
        pw = sn
    else:
        g = np.sin(0.5 * phi) ** 2
        pw = sn * sn
    for j in range(q.shape[0]):
        g -= pw * cs * q[j]
        pw *= sn * sn
    return g if flip else 1.0 - g


@njit(cache=True)
def _cdf_theta(theta, d, a, beta, lam, cd, q):
    """``(F(cos theta), dF/dtheta)``; dF/dtheta = -c_d sin^{d-2}(theta) h_t(cos theta) <= 0."""
    w = np.cos(theta)
    sn = np.sin(theta)
    h, s = _series(w, a, beta, lam)
    f = _f0_theta(theta, d, q) - cd * sn ** (d - 1) * s
    return f, -cd * sn ** (d - 2) * h


@njit(cache=True)
def _invert(u, d, a, beta, lam, cd, q, grid, fgrid, tol):
    """The angle theta with F(cos theta) = u: bracket from the table, then safeguarded Newton."""
    n = grid.shape[0]
    if u >= fgrid[0]:
        return 0.0
    i, j = 0, n - 1  # fgrid decreasing: keep fgrid[i] >= u > fgrid[j]
    while j - i > 1:
        m = (i + j) // 2
        if fgrid[m] >= u:
            i = m
        else:
            j = m
    lo, hi = grid[i], grid[j]
    th = lo + (fgrid[i] - u) / (fgrid[i] - fgrid[j]) * (hi - lo)
    for _ in range(200):
        f, df = _cdf_theta(th, d, a, beta, lam, cd, q)
        g = f - u
        if abs(g) < tol:
            break
        if g > 0.0:  # F decreases in theta: the root lies above th
            lo = th
        else:
            hi = th
        if hi - lo <= 4.4e-16 * hi:
            break
        nxt = th - g / df if df < 0.0 else -1.0
        if not (lo < nxt < hi):
            nxt = 0.5 * (lo + hi)
        th = nxt
    return th


@njit(parallel=True, cache=True)
def sample_heat(x, a, beta, lam, cd, q, grid, fgrid, tol, key, out):
    """Fill out[i] with a draw of Brownian motion on S^{d-1} started at x[i]; x (n, d) unit rows.

    One uniform per row inverts the CDF of w = x . x+ (:func:`_invert`); ``omw = 1 - w =
    2 sin^2(theta/2)`` keeps full precision for small angles; then a uniform tangent direction.
    """
    n, d = out.shape
    n_chunks = (n + CHUNK - 1) // CHUNK
    for c in prange(n_chunks):
        state = np.empty(4, dtype=np.uint64)
        chunk_state(key, c, state)
        work = np.empty(d)
        for i in range(c * CHUNK, min(n, (c + 1) * CHUNK)):
            u = uniform_pos(state)
            th = _invert(u, d, a, beta, lam, cd, q, grid, fgrid, tol)
            omw = 2.0 * np.sin(0.5 * th) ** 2
            compose_at(state, x, i, omw, out, i, work)


@njit(cache=True)
def _cdf_theta_many(thetas, d, a, beta, lam, cd, q):
    out = np.empty(thetas.shape[0])
    for i in range(thetas.shape[0]):
        out[i] = _cdf_theta(thetas[i], d, a, beta, lam, cd, q)[0]
    return out


@njit(cache=True)
def _invert_many(us, d, a, beta, lam, cd, q, grid, fgrid, tol):
    out = np.empty(us.shape[0])
    for i in range(us.shape[0]):
        out[i] = _invert(us[i], d, a, beta, lam, cd, q, grid, fgrid, tol)
    return out


# --------------------------------------------------------------------------------------------
# Per-dimension tables and NumPy reference evaluation
# --------------------------------------------------------------------------------------------

class _Table(NamedTuple):
    d: int
    lam: float
    a: NDArray              # a_l, l < L
    beta: NDArray           # beta_l (beta_0 = 0)
    log_c: float            # log c_d
    q: NDArray              # F_0 recurrence coefficients
    err_h: float            # rounding bound of the density series h
    err_cdf: float          # rounding bound of the CDF series
    grid: NDArray           # angles theta_k = k pi / 1024
    fgrid: NDArray          # F(cos theta_k), decreasing from 1 to 0
    tol: float              # stopping tolerance of the inversion

    def jit_args(self):
        return (self.d, self.a, self.beta, self.lam, math.exp(self.log_c), self.q)


def _build_table(d: int, t: float) -> _Table:
    plan = _plan(d, t)
    if not plan.admissible:
        t_min = _min_time(d)
        why = (f"the series would need more than {_MAX_TERMS} terms" if plan.n_terms is None else
               f"the heat-kernel series cancels in float64 (CDF error bound "
               f"~1e{plan.log_err_cdf / math.log(10.0):+.0f} > {_CDF_ERR_MAX:g})")
        raise ValueError(f"'t' = {t!r} is too small for dimension d = {d}: {why}; "
                         f"use t >= {t_min:g} for d = {d} (see BrownianKernel.min_time)")
    a, beta = _exact_coefficients(d, t, plan.n_terms)
    log_c = _log_c(d)
    weight = np.arange(1.0, plan.n_terms + 1.0)  # l + 1
    err_h = _EPS_SERIES * float(np.sum(weight * a))
    err_cdf = _EPS_SERIES * math.exp(log_c) * float(np.sum(weight * beta))
    q = _f0_coefficients(d)
    lam = 0.5 * (d - 2)
    grid = np.linspace(0.0, np.pi, _N_GRID)
    fgrid = _cdf_theta_many(grid, d, a, beta, lam, math.exp(log_c), q)
    fgrid[0], fgrid[-1] = 1.0, 0.0
    fgrid = np.minimum.accumulate(np.clip(fgrid, 0.0, 1.0))  # monotone despite rounding
    for arr in (a, beta, q, grid, fgrid):
        arr.flags.writeable = False
    return _Table(d, lam, a, beta, log_c, q, err_h, err_cdf, grid, fgrid, _NEWTON_TOL)


def _neumaier(total: NDArray, comp: NDArray, x: NDArray) -> NDArray:
    """One step of compensated summation; updates ``comp`` in place, returns the new total."""
    y = total + x
    comp += np.where(np.abs(total) >= np.abs(x), (total - y) + x, (x - y) + total)
    return y


def _series_np(w: NDArray, tab: _Table) -> tuple[NDArray, NDArray]:
    """NumPy reference of :func:`_series`, vectorised over w."""
    lam, mu = tab.lam, tab.lam + 1.0
    h = np.full(w.shape, tab.a[0])
    s = np.zeros(w.shape)
    hc = np.zeros(w.shape)
    sc = np.zeros(w.shape)
    pm1, p = np.ones(w.shape), w.copy()
    cm1, c = np.zeros(w.shape), np.ones(w.shape)
    for l in range(1, tab.a.size):
        h = _neumaier(h, hc, tab.a[l] * p)
        s = _neumaier(s, sc, tab.beta[l] * c)
        pm1, p = p, (2.0 * (l + lam) * w * p - l * pm1) / (l + 2.0 * lam)
        k = l - 1
        cm1, c = c, (2.0 * (k + mu) * w * c - k * cm1) / (k + 2.0 * mu)
    return h + hc, s + sc


def _fixed_exp(t: float, k: int, bits: int) -> int:
    """``round(exp(-k t / 2) 2^bits)`` for a float t > 0 and an integer k >= 0, exactly rounded
    (the exponent is formed in decimal arithmetic from the exact binary value of t)."""
    with localcontext() as ctx:
        ctx.prec = int(bits * 0.30103) + 30
        ctx.Emax, ctx.Emin = MAX_EMAX, MIN_EMIN
        x = -Decimal(t) * k / 2
        return int((_exp_decimal(x) * (Decimal(2) ** bits)).to_integral_value())


def _log_h_exact(w: float, d: int, t: float, log_sum_a: float) -> float:
    """``log h_t(w)`` summed in fixed-point integer arithmetic at a precision that resolves the
    cancellation (the far tail, where the float64 series is dominated by rounding).

    All quantities are integers scaled by ``2^bits``: ``a_l`` by ``a_l = a_{l-1} r_l N_l/N_{l-1}``,
    ``r_{l+1} = r_l exp(-t)``, and ``P_l`` by its recurrence with integer coefficients (w is a
    dyadic rational). The precision starts from the digits the sum can lose,
    ``log(sum_l a_l / h_t(w))`` with ``h_t(w) ~ exp(-theta^2 / (2 t))``, and is raised until the
    result keeps at least 64 correct bits.
    """
    t = min(t, _T_UNIFORM)
    theta = math.acos(w)
    lost = (max(log_sum_a, 0.0) + 0.5 * theta * theta / t) / math.log(2.0)
    num, den = float(w).as_integer_ratio()
    ws = den.bit_length() - 1  # w = num / 2^ws
    while True:
        bits = int(lost) + 128
        # work ~ (number of terms) x (cost of a bits-wide product); ~1 s at 5e5
        n_est = math.sqrt(2.0 * bits * math.log(2.0) / t) + d
        if n_est * (bits / 1000.0) ** 1.6 > _EXACT_MAX_WORK:
            raise ValueError(
                f"the density of BrownianKernel(t={t:g}) on S^{d - 1} at x . y = {w!r} is about "
                f"exp({-bits * math.log(2.0):.3g}); evaluating it exactly needs {bits}-bit arithmetic "
                f"over ~{n_est:.0f} terms, beyond the budget. Such points lie in the far tail; "
                f"a larger 't' makes them cheaper")
        one = 1 << bits
        r = _fixed_exp(t, d - 1, bits)
        q = _fixed_exp(t, 2, bits)
        a_l = one
        total = one           # a_0 P_0
        mag = one
        pm1, p = one, (num << bits) >> ws
        l = 1
        while True:
            a_next = (a_l * r) >> bits
            if d == 2:
                a_next = 2 * a_next if l == 1 else a_next
            else:
                # N_l / N_{l-1} = (2 l + d - 2)(l + d - 3) / ((2 l + d - 4) l)
                a_next = a_next * ((2 * l + d - 2) * (l + d - 3)) // ((2 * l + d - 4) * l)
            r = (r * q) >> bits
            total += (a_next * p) >> bits
            mag += a_next
            if a_next < a_l and a_next < 16:  # below the resolution and decreasing (Gaussian tail)
                break
            a_l = a_next
            p, pm1 = (((2 * l + d - 2) * num * p) >> ws) - l * pm1, p
            p //= l + d - 2
            l += 1
        if total > 0:
            lost_now = (mag.bit_length() - total.bit_length()) + 1
            if bits - lost_now >= 64 + 2 * l.bit_length():
                # log(total 2^-bits) = log(m) + k log 2 with m in [1, 2): no cancellation
                k = total.bit_length() - 1
                m = (total >> (k - 60)) / 2.0**60 if k > 60 else total / 2.0**k
                return math.log(m) + (k - bits) * math.log(2.0)
            lost = lost_now + 64
        else:
            lost = 2.0 * lost + 64


def _log_h(w: NDArray, tab: _Table, t: float) -> NDArray:
    """``log h_t(w)``: the float64 series where its rounding bound is below 1e-10 of its value,
    the exact fixed-point sum (:func:`_log_h_exact`) elsewhere (the far tail)."""
    h, _ = _series_np(w, tab)
    bad = h < _TAIL_FACTOR * tab.err_h
    out = np.empty(w.shape)
    out[~bad] = np.log(h[~bad])
    if np.any(bad):
        log_sum_a = math.log(float(np.sum(tab.a)))
        vals, inv = np.unique(w[bad], return_inverse=True)
        out[bad] = np.array([_log_h_exact(float(v), tab.d, t, log_sum_a) for v in vals])[inv]
    return out


def _as_float_array(name: str, value) -> NDArray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must be an array of real numbers, got {value!r}") from None
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    return arr


# --------------------------------------------------------------------------------------------
# The kernel
# --------------------------------------------------------------------------------------------

class BrownianKernel(MarkovKernel):
    """Spherical Brownian motion (generator Laplacian/2) on S^{d-1} run for time t.

    ``M(x, .)`` is the law at time t of Brownian motion started at x. Points are on the last
    axis, shape ``(n, d)`` or ``(d,)``; d is read from the input (any d >= 2).

    Parameters
    ----------
    t : float
        Diffusion time, finite and > 0. For each dimension d, t must also be at least
        :meth:`min_time` ``(d)``, checked at the first use of d (see Notes).

    Notes
    -----
    Density w.r.t. surface measure:
    ``M(x, y) = h_t(x . y) / |S^{d-1}|``, ``h_t(w) = sum_l exp(-l (l + d - 2) t / 2) N_l P_l(w)``
    (see :mod:`simkit.distributions.heat`); ``E[x . x+] = exp(-(d - 1) t / 2)`` (docs/theory.md section 4).

    *Admissible times.* In float64 the series cancels when t is small relative to d. At the first
    use of a dimension d the kernel bounds the rounding error of its CDF series; if that exceeds
    1e-10, or the series needs more than 20000 terms, a ``ValueError`` names ``'t'`` and gives the
    smallest admissible t, :meth:`min_time` ``(d)`` (a table in docs/design.md, "BrownianKernel"):
    in high dimension only diffuse kernels are available.

    *Tails of the density.* Where the density series' rounding bound exceeds 1e-10 of its value,
    :meth:`logpdf` and :meth:`pdf_cosine` re-sum it exactly in integer arithmetic (slow deep in the
    tail of a concentrated kernel); points beyond a fixed work budget raise ``ValueError`` rather
    than return an inaccurate value. Elsewhere ``logpdf`` is accurate to ~1e-10 absolute.
    :meth:`pdf_angle` is the density of the angle, finite at both ends for every d (use it for
    quadrature; ``pdf_cosine`` is infinite at w = +-1 for d = 2). For t >= 1e3 the kernel equals the
    uniform distribution to machine precision.
    """

    def __init__(self, t: float):
        self.t = check_scalar("t", t, low=0.0, low_inclusive=False)
        # per-dimension tables, built lazily; the dict is created before freezing and only
        # ever filled, so the kernel stays immutable from the user's point of view
        self._tables: dict[int, _Table] = {}
        self._freeze()

    def __repr__(self):
        return f"BrownianKernel(t={self.t:g})"

    def describe(self) -> str:
        return f"Brownian kernel (t={self.t:g})"

    @staticmethod
    def min_time(d: int) -> float:
        """Smallest admissible t on S^{d-1} (3 significant digits, rounded up).

        The CDF rounding bound ``eps c_d sum_l (l + 1) beta_l`` must be <= 1e-10 and the series
        at most 20000 terms long; found by bisection on t (the bound decreases with t).
        """
        return _min_time(check_dim("d", d))

    def _table(self, d: int) -> _Table:
        tab = self._tables.get(d)
        if tab is None:
            tab = _build_table(d, self.t)
            self._tables[d] = tab
        return tab

    def _check_dim(self, d: int) -> None:
        self._table(d)

    # -- sampling and density on the sphere -------------------------------------------------

    def _sample(self, x, rng):
        tab = self._table(x.shape[1])
        out = np.empty_like(x)
        sample_heat(x, tab.a, tab.beta, tab.lam, math.exp(tab.log_c), tab.q, tab.grid, tab.fgrid,
                    tab.tol, draw_key(rng), out)
        return out

    def _logpdf(self, x, y):
        d = x.shape[-1]
        w = np.clip(np.sum(x * y, axis=-1), -1.0, 1.0)
        return _log_h(np.atleast_1d(w), self._table(d), self.t).reshape(w.shape) - float(log_sphere_area(d))

    # -- the law of w = x . x+ on [-1, 1] ---------------------------------------------------

    def mean_cosine(self, d: int) -> float:
        """``E[x . x+] = exp(-(d - 1) t / 2)``."""
        d = check_dim("d", d)
        return math.exp(-0.5 * (d - 1) * self.t)

    def pdf_cosine(self, w: ArrayLike, d: int) -> NDArray[np.float64]:
        """Density of ``w = x . x+`` on [-1, 1]: ``c_d (1 - w^2)^{(d-3)/2} h_t(w)``.

        Zero outside [-1, 1] (and at w = +-1 for d >= 4); infinite at w = +-1 for d = 2
        (arcsine-type singularity). Relative accuracy ~1e-10 or better, with the exact tail
        summation of :meth:`logpdf` (see the class Notes).
        """
        d = check_dim("d", d)
        w = _as_float_array("w", w)
        tab = self._table(d)
        wf = np.atleast_1d(w).ravel()
        out = np.zeros(wf.shape)
        inside = (wf >= -1.0) & (wf <= 1.0)
        if d >= 4:
            inside &= np.abs(wf) < 1.0  # (1 - w^2)^{(d-3)/2} = 0 there
        wi = wf[inside]
        ex = 0.5 * (d - 3)
        with np.errstate(divide="ignore"):
            log_jac = ex * np.log((1.0 - wi) * (1.0 + wi)) if ex != 0.0 else np.zeros(wi.shape)
        out[inside] = np.exp(tab.log_c + log_jac + _log_h(wi, tab, self.t))
        return out.reshape(np.shape(w))

    def pdf_angle(self, theta: ArrayLike, d: int) -> NDArray[np.float64]:
        """Density of the angle ``theta = arccos(x . x+)`` on [0, pi]: ``c_d sin^{d-2}(theta) h_t(cos theta)``.

        Equal to ``pdf_cosine(cos theta) sin theta`` but finite for every d >= 2 (no endpoint
        singularity), so it is the form to integrate numerically. Zero outside [0, pi].
        """
        d = check_dim("d", d)
        th = _as_float_array("theta", theta)
        tab = self._table(d)
        tf = np.atleast_1d(th).ravel()
        out = np.zeros(tf.shape)
        inside = (tf >= 0.0) & (tf <= np.pi)
        if d > 2:
            inside &= (tf > 0.0) & (tf < np.pi)  # sin^{d-2} = 0 there
        ti = tf[inside]
        log_jac = (d - 2) * np.log(np.sin(ti)) if d > 2 else np.zeros(ti.shape)
        out[inside] = np.exp(tab.log_c + log_jac + _log_h(np.cos(ti), tab, self.t))
        return out.reshape(np.shape(th))

    def cdf_cosine(self, w: ArrayLike, d: int) -> NDArray[np.float64]:
        """CDF of ``w = x . x+``: ``F_0(w) - c_d (1 - w^2)^{lambda+1/2} sum_{l>=1} beta_l Ct_{l-1}(w)``.

        Exact term by term (see :mod:`simkit.distributions.heat`); absolute error below
        ``eps c_d sum_l (l + 1) beta_l`` (<= 1e-10; in practice ~1e-15). Clipped to [0, 1];
        0 below -1 and 1 above 1.
        """
        d = check_dim("d", d)
        w = _as_float_array("w", w)
        tab = self._table(d)
        wc = np.clip(np.atleast_1d(w).ravel(), -1.0, 1.0)
        _, s = _series_np(wc, tab)
        half = 0.5 * (d - 1)
        f = betainc(half, half, 0.5 * (1.0 + wc)) - math.exp(tab.log_c) * np.power(
            (1.0 - wc) * (1.0 + wc), half) * s
        return np.clip(f, 0.0, 1.0).reshape(np.shape(w))

    def log_mgf_cosine(self, a: ArrayLike, d: int) -> NDArray[np.float64]:
        """``log E exp(a w)`` for ``w = x . x+``, exact from the series (Funk--Hecke).

        Notes
        -----
        ``E_uniform[exp(a w) P_l(w)] = Gamma(d/2) (2/a)^{d/2-1} I_{l+d/2-1}(a)``, so
        ``E exp(a w) = sum_l a_l Gamma(d/2) (2/|a|)^{d/2-1} (+-1)^l I_{l+d/2-1}(|a|)`` with the sign
        ``(-1)^l`` for a < 0 (P_l has parity l). The terms are summed in log space; for a < 0 the
        alternating sum is re-done in mpmath when it cancels by more than two digits.
        """
        d = check_dim("d", d)
        arr = _as_float_array("a", a)
        tab = self._table(d)
        af = np.atleast_1d(arr).ravel()
        out = np.empty(af.shape)
        nu = 0.5 * d - 1.0
        l = np.arange(tab.a.size, dtype=float)
        pos = tab.a > 0.0
        with np.errstate(divide="ignore"):
            log_coef = np.where(pos, np.log(np.where(pos, tab.a, 1.0)), -np.inf)
        for i, ai in enumerate(af):
            if ai == 0.0:
                out[i] = 0.0
                continue
            x = abs(ai)
            logt = log_coef + gammaln(0.5 * d) + nu * math.log(2.0 / x) + log_bessel_iv(l + nu, x)
            m = float(np.max(logt))
            terms = np.exp(logt - m)
            if ai > 0.0:
                out[i] = m + math.log(float(np.sum(terms)))
                continue
            total = float(np.sum(terms * np.where(l % 2 == 0, 1.0, -1.0)))
            if total > 1e-2 * float(np.sum(terms)):
                out[i] = m + math.log(total)
            else:
                out[i] = _log_mgf_mp(ai, d, self.t)
        return out.reshape(np.shape(arr))


def _log_mgf_mp(a: float, d: int, t: float) -> float:
    """``log E exp(a w)`` by the Funk--Hecke series in mpmath (used when it cancels in float64)."""
    import mpmath

    ctx = mpmath.MPContext()
    dps = 30 + int(2.0 * abs(a) / math.log(10.0))
    while True:
        ctx.dps = dps
        tt = ctx.mpf(min(t, _T_UNIFORM))
        x = ctx.mpf(abs(a))
        lam = ctx.mpf(d - 2) / 2
        nu = ctx.mpf(d) / 2 - 1
        pref = ctx.gamma(ctx.mpf(d) / 2) * (2 / x) ** nu
        tiny = ctx.mpf(10) ** (-dps)
        total = pref * ctx.besseli(nu, x)
        mag = abs(total)
        c_l = ctx.mpf(1)
        prev = mag
        l = 1
        while True:
            if d == 2:
                n_l = ctx.mpf(2)
            else:
                c_l = c_l * (l + 2 * lam - 1) / l
                n_l = (l + lam) / lam * c_l
            term = ctx.exp(-tt * l * (l + d - 2) / 2) * n_l * pref * ctx.besseli(l + nu, x)
            total += term if l % 2 == 0 else -term
            mag += term
            if term < prev and term < tiny * mag:
                break
            prev = term
            l += 1
        if total > 0 and float(ctx.log10(mag / total)) < dps - 20:
            return float(ctx.log(total))
        dps *= 2
