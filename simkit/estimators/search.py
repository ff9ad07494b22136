"""Similarity search on unseen data (claim C2): empirical softmax vs ideal retrieval kernels.

Notation (docs/theory.md sections 1--3, phi = identity): a query ``x ~ pi``, a database of k unseen
points ``y_1..y_k ~ pi``, scores ``s_j = x.y_j / tau`` and density ratios
``m_j = m(x, y_j) = dM(x, .)/dpi (y_j)`` (closed form for the vMF and rotated vMF kernels; for
the Brownian kernel ``h_t(x.y_j) / (|S^{d-1}| pi(y_j))``, the heat-kernel series summed per pair to
1e-12 relative, :func:`_heat_profile`). The empirical softmax kernel and the ideal empirical
kernel are

    Q_k(x, y_j) = e^{s_j} / S_k,   S_k = sum_{i<=k} e^{s_i},
    M_k(x, y_j) = m_j / W_k,       W_k = sum_{i<=k} m_i,

and ``CE(M_k, Q_k) = -sum_j M_k(x, y_j) log Q_k(x, y_j) = log S_k - V_k / W_k`` with
``V_k = sum_{i<=k} m_i s_i``: every term is a prefix sum, so one streaming pass over K_max points
gives every k of a grid (common random numbers across k). With a positive ``x+ ~ M(x, .)``
(score s0) and the InfoNCE risk ``R_k = E[-s0 + log(e^{s0} + S_k)]``, claim C2 concerns
``D_k = R_k - E CE(M_k, Q_k) = E log(1 + e^{s0}/S_k) + E[V_k/W_k - s0] = d1/k + O(1/k^2)``, d1 derived
in docs/theory.md section 11 (:func:`search_constants`).
Control variates with conditional mean exactly zero given x (:data:`CONTROL_VARIATES`) reduce the
variance without bias; their coefficients, one set per k, come from an independent pilot
(:meth:`SearchEstimator.calibrate`), never from the blocks they are applied to. Their definitions
and the pilot's safeguards: docs/design.md, "simkit.estimators.search".

Retrieval quality: ``top1`` is 1 when argmax_j Q_k(x, y_j) = argmax_j M_k(x, y_j); ``recall`` is
the overlap of the two top-``n_top`` sets divided by ``n_top`` (defined for k >= n_top).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from decimal import MAX_EMAX, MIN_EMIN, Decimal, localcontext
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit.exact import formulas as exact
from simkit.distributions import heat as _heat
from simkit._jit.blas import single_threaded_blas
from simkit._jit.infonce import tile_negatives
from simkit._jit.search import N_SUMS, search_sums, tile_values
from simkit._jit.special import log_sphere_area, log_vmf_norm, mean_resultant_length
from simkit._checks import check_int, check_points, check_rng, check_scalar
from simkit.distributions.heat import BrownianKernel
from simkit.estimators.infonce import TAU_MIN, _check_grid, k_grid
from simkit.distributions.kernels import MarkovKernel, RotatedVMFKernel, VMFKernel
from simkit.distributions.sphere import Discrete, SphereDistribution, Uniform

__all__ = ["N_TOP", "SEARCH_STATS", "CONTROL_VARIATES", "TAYLOR_COEF", "search_statistics", "SearchEstimator",
           "search_constants"]

#: size of the retrieved set for recall@N_TOP
N_TOP = 10

#: largest spread of log m over one query's database that the scaled sums of m^2 tolerate
_LOG_M_SPAN = 340.0

#: relative accuracy guaranteed for the heat-kernel density h_t in the jitted pass (both paths)
_HEAT_RTOL = 1e-12
#: unit of the double-double rounding bound: 2^-100, 64 times the double-double unit roundoff
_EPS_DD = 2.0**-100

#: names of the per-block statistics of :meth:`SearchEstimator.block` (means over queries)
SEARCH_STATS = {
    "d_cv": "mean of T1_k + T2_k - sum_c b_c CV_c (control variates, pilot coefficients)",
    "d_rb": "mean of T1_k + T2_k: the positive's score replaced by its exact conditional mean, no control variate",
    "d_plain": "mean of l_k - CE(M_k, Q_k) (plain difference, positive's score s0)",
    "d_cv_var": "within-block variance of the control-variate estimator across queries",
    "pos_term": "mean of T1_k = log(1 + e^{s0} / S_k)",
    "snis_term": "mean of T2_k = V_k / W_k - mu_s(x)",
    "loss": "mean InfoNCE loss l_k = -s0 + log(e^{s0} + S_k)",
    "ce": "mean CE(M_k, Q_k) = log S_k - V_k / W_k",
    "top1": "fraction of ranked queries whose argmax under Q_k equals that under M_k",
    "recall": "mean of |top-N(Q_k) cap top-N(M_k)| / N over ranked queries (NaN where k < N)",
}

#: the control variates (conditional mean exactly zero given x) in the column order of the coefficients
CONTROL_VARIATES = {
    "B": "(e^{s0} - m1(x)) / (k Z(x))",
    "F": "e^{s0} A_k / (k Z(x)), A_k = S_k / (k Z(x)) - 1",
    "A": "S_k / (k Z(x)) - 1",
    "U": "(1/k) sum_j m_j (s_j - mu_s(x))",
    "Wc": "W_k / k - 1",
    "G": "(1/k^2) sum_{i != j} m_i (s_i - mu_s(x)) (m_j - 1)",
}

#: Taylor values of the coefficients (used without a pilot)
TAYLOR_COEF = (1.0, -1.0, 0.0, 1.0, 0.0, -1.0)


# ----------------------------------------------------------------------------------------------
# the density ratio m = dM(x, .)/dpi in the form the jitted pass needs

def _check_pair(pi, kernel) -> None:
    if not isinstance(pi, SphereDistribution):
        raise ValueError(f"'pi' must be a simkit sphere distribution, got {type(pi).__name__}")
    if isinstance(pi, Discrete):
        raise ValueError("'pi' must have a density: M(x, .) has no density w.r.t. a Discrete pi, so m is undefined")
    if not isinstance(kernel, MarkovKernel):
        raise ValueError(f"'kernel' must be a simkit Markov kernel, got {type(kernel).__name__}")
    if isinstance(kernel, BrownianKernel):
        _heat_profile(kernel, pi.dim)  # t admissible for d (simkit.distributions.heat) and for the jitted pass
        return
    if not isinstance(kernel, (VMFKernel, RotatedVMFKernel)):
        raise ValueError(f"'kernel' must be VMFKernel or RotatedVMFKernel (m(x, y) in closed form) or "
                         f"BrownianKernel (heat-kernel series), got {type(kernel).__name__}")
    if isinstance(kernel, RotatedVMFKernel) and kernel.dim != pi.dim:
        raise ValueError(f"'kernel' has dimension {kernel.dim} but 'pi' has dimension {pi.dim}")


class _HeatProfile(NamedTuple):
    """The heat-kernel series in the form the jitted pass needs (:func:`_heat_profile`)."""

    a_hi: NDArray      # a_l: those of simkit.distributions.heat, then further terms for the double-double sum
    a_lo: NDArray      # a_l - a_hi to double-double precision
    n_float: int       # terms of the float64 series (simkit.distributions.heat's truncation)
    lam: float         # (d - 2) / 2
    cut: float         # float64 series used where its value is >= cut (rounding bound <= 1e-12 of it)
    log_h_max: float   # log h_t(1) = log sum_l a_l
    log_h_min: float   # log h_t(-1) (exact, simkit.distributions.heat)


_HEAT_PROFILES: dict[tuple[float, int], _HeatProfile] = {}


def _heat_profile(kernel: BrownianKernel, d: int) -> _HeatProfile:
    """Coefficients and cut-off for summing ``h_t(w) = sum_l a_l P_l(w)`` per pair (cached per (t, d)).

    Accuracy. The float64 series (that of :mod:`simkit.distributions.heat`, its coefficients and truncation)
    has rounding error at most ``err_h = 2^-53 sum_l (l + 1) a_l``; the jitted pass keeps it where
    ``h >= err_h / 1e-12`` and re-sums the pair in double-double arithmetic elsewhere (the far
    tail, w -> -1). That sum runs further than heat.py's truncation (which is relative to the
    largest term, 1e-17, too early for values far below it): until the terms fall below
    ``2^-110 sum_l a_l`` and decrease (the log terms are concave in l, as in heat.py), with
    coefficients ``a_hi + a_lo`` exact to ~2^-150 (50-digit decimal exponentials and the integer
    dimensions ``N_l``, as heat.py's ``_exact_coefficients``). Its rounding error is at most
    ``2^-100 sum_l (l + 1) a_l`` (64 times the double-double unit roundoff, growing linearly in l
    like the float64 bound). h_t decreases in the angle, so that bound is <= 1e-12 h_t(w) for
    every w when it is at w = -1 (h_t(-1) from simkit.distributions.heat, exact); otherwise t is refused for d.
    So every log m in the pass is within ~1e-12 of the exact value (tests/studies/test_asymmetry.py
    checks both paths against heat.py's exact fixed-point sum).
    """
    key = (float(kernel.t), int(d))
    prof = _HEAT_PROFILES.get(key)
    if prof is not None:
        return prof
    tab = kernel._table(d)  # ValueError for t < BrownianKernel.min_time(d)
    n = tab.a.size
    a_hi, a_lo = [1.0], [0.0]
    tt = Decimal(min(kernel.t, _heat._T_UNIFORM))
    stop = Decimal(2) ** -110 * Decimal(math.fsum(tab.a))
    with localcontext() as ctx:
        ctx.prec = 50
        ctx.Emax, ctx.Emin = MAX_EMAX, MIN_EMIN
        prev = Decimal(1)
        l = 1
        while True:
            e = _heat._exp_decimal(-tt * (l * (l + d - 2)) / 2)
            n_l = 2 if d == 2 else math.comb(l + d - 1, d - 1) - math.comb(l + d - 3, d - 1)
            v = e * n_l
            if l >= n and v < stop and v < prev:
                break
            hi = float(tab.a[l]) if l < n else float(v)
            a_hi.append(hi)
            a_lo.append(float(v - Decimal(hi)))
            prev = v
            l += 1
            if l > _heat._MAX_TERMS:  # pragma: no cover - admissible t have far shorter series
                raise ValueError(f"'t' = {kernel.t!r} is too small for the search estimator on S^{d - 1}")
    a_hi, a_lo = np.array(a_hi), np.array(a_lo)
    log_h_min = float(_heat._log_h(np.array([-1.0]), tab, kernel.t)[0])
    log_h_max = math.log(math.fsum(tab.a))
    log_bound_dd = math.log(_EPS_DD) + math.log(float(np.sum(np.arange(1.0, a_hi.size + 1.0) * a_hi)))
    if log_bound_dd > math.log(_HEAT_RTOL) + log_h_min:
        raise ValueError(
            f"'t' = {kernel.t!r} is too small for the search estimator on S^{d - 1}: the heat-kernel density at "
            f"x . y = -1 is e^{log_h_min:.1f} of its mean, below what double-double summation resolves to "
            f"{_HEAT_RTOL:g} relative (bound e^{log_bound_dd:.1f}); use a larger 't'")
    for arr in (a_hi, a_lo):
        arr.flags.writeable = False
    prof = _HeatProfile(a_hi, a_lo, n, float(tab.lam), tab.err_h / _HEAT_RTOL, log_h_max, log_h_min)
    _HEAT_PROFILES[key] = prof
    return prof


def _log_m_parts(pi: SphereDistribution, kernel: MarkovKernel, x: NDArray, y: NDArray):
    """``log m(x_i, y_j) = a + kappa u_i . y_j + b_j``: returns a, u, same_u, kappa, b.

    vMF kernel: u = x; rotated vMF kernel: u = R x; ``a = log C_d(kappa)``, ``b_j = -log pi(y_j)``.
    Brownian kernel: ``log m = a + log h_t(x_i . y_j) + b_j`` with ``a = -log |S^{d-1}|``, u = x
    (kappa unused, returned as 0).
    """
    d = x.shape[1]
    if isinstance(kernel, BrownianKernel):
        return -float(log_sphere_area(d)), x, True, 0.0, np.ascontiguousarray(-pi.logpdf(y))
    a = float(log_vmf_norm(d, kernel.kappa))
    if isinstance(kernel, RotatedVMFKernel):
        u, same = np.ascontiguousarray(x @ kernel.rotation.T), False
    else:
        u, same = x, True
    b = -pi.logpdf(y)
    return a, u, same, float(kernel.kappa), np.ascontiguousarray(b)


#: the heat coefficients of a vMF call: read-only like a Brownian kernel's (:func:`_heat_profile`), so that
#: the jitted search_sums has one specialisation. With two (read-only and writable arrays), which one a
#: call ran would depend on what the process had compiled before (Numba converts a writable array to an
#: existing read-only specialisation), and under contraction of multiply-adds their last bits differ.
_NO_HEAT = np.zeros(0)
_NO_HEAT.flags.writeable = False


def _sums(x, u, same_u, y, b, tau, kappa, shift_s, shift_m, mu, grid, n_top, n_rank, heat=None):
    """Run the jitted pass; top1/overlap are NaN where not computed. ``heat``: the profile of a
    Brownian kernel (:func:`_heat_profile`), None for the vMF kernels."""
    if heat is None:
        heat_args = (_NO_HEAT, _NO_HEAT, 0, 0.0, 0.0)
    else:
        heat_args = (heat.a_hi, heat.a_lo, heat.n_float, heat.lam, heat.cut)
    n, g = x.shape[0], grid.size
    sums = np.empty((n, g, N_SUMS))
    top1 = np.full((n, g), np.nan)
    overlap = np.full((n, g), np.nan)
    # BLAS runs single-threaded inside the parallel loop: the parallelism is over query tiles
    with single_threaded_blas():
        search_sums(np.ascontiguousarray(x), np.ascontiguousarray(u), bool(same_u), tile_negatives(y),
                    tile_values(b), y.shape[0], 1.0 / tau, float(kappa), *heat_args, np.ascontiguousarray(shift_s),
                    np.ascontiguousarray(shift_m), np.ascontiguousarray(mu), grid, int(n_top), int(n_rank),
                    sums, top1, overlap)
    return sums, top1, overlap


def _shift_m(kappa: float, u: NDArray, b: NDArray, heat: _HeatProfile | None = None) -> NDArray:
    """Per-query shift with ``log m - a - shift <= 0``; checks that the scaled m^2 cannot underflow."""
    if heat is not None:  # log h_t spans [log h_t(-1), log h_t(1)]
        span = heat.log_h_max - heat.log_h_min + float(b.max() - b.min())
        if span > _LOG_M_SPAN:
            raise ValueError(f"'kernel' (Brownian, log h_t spanning {heat.log_h_max - heat.log_h_min:.4g}) with a "
                             f"spread of log pi of {float(b.max() - b.min()):.4g} makes m(x, y) span e^{span:.0f} > "
                             f"e^{_LOG_M_SPAN:.0f}; use a larger t or a less concentrated pi")
        return np.full(u.shape[0], heat.log_h_max + float(b.max()))
    span = 2.0 * kappa + float(b.max() - b.min())
    if span > _LOG_M_SPAN:
        raise ValueError(f"'kernel' concentration {kappa:g} with a spread of log pi of {float(b.max() - b.min()):.4g} "
                         f"over the database makes m(x, y) span e^{span:.0f} > e^{_LOG_M_SPAN:.0f}; use a smaller "
                         f"kappa or a less concentrated pi")
    return kappa * np.sqrt(np.sum(u * u, axis=1)) + float(b.max())


def search_statistics(x: ArrayLike, x_pos: ArrayLike, database: ArrayLike, pi: SphereDistribution,
                      kernel: MarkovKernel, tau: float, k: ArrayLike, *,
                      n_top: int = N_TOP) -> dict[str, NDArray[np.float64]]:
    """InfoNCE loss, empirical cross-entropy and retrieval agreement for every query and every k.

    Parameters
    ----------
    x, x_pos : array_like, shape (B, d)
        Queries and their positives (unit vectors; phi = identity).
    database : array_like, shape (K, d)
        Database points shared by all queries; the statistics for k use the first k of them.
    pi : SphereDistribution
        The data distribution (with a density: not Discrete); ``m = dM(x, .)/dpi``.
    kernel : VMFKernel, RotatedVMFKernel or BrownianKernel
        The positive kernel M.
    tau : float
        Temperature, >= 0.005.
    k : array_like of int
        Strictly increasing database sizes, each <= K.
    n_top : int
        Size of the retrieved sets for ``recall``.

    Returns
    -------
    dict of ndarray, each shape (B, len(k))
        ``loss``: ``l_k = -s0 + log(e^{s0} + S_k)``; ``ce``: ``CE(M_k, Q_k) = log S_k - V_k/W_k``;
        ``d``: ``loss - ce``; ``top1``: 1.0 if the argmaxes of Q_k and M_k coincide, else 0.0;
        ``recall``: ``|top-n_top(Q_k) cap top-n_top(M_k)| / n_top`` (NaN where k < n_top). Nats
        for the first three.

    Raises
    ------
    ValueError
        For invalid shapes, non-unit vectors, tau < 0.005, a bad grid, a Discrete pi or an
        unsupported kernel; for a BrownianKernel whose t is below ``BrownianKernel.min_time(d)`` or
        too small for the per-pair series (see ``_heat_profile``).

    Notes
    -----
    ``m(x, y) = C_d(kappa) e^{kappa u.y} / pi(y)`` with u = x (vMF kernel) or u = R x (rotated);
    ``m(x, y) = h_t(x.y) / (|S^{d-1}| pi(y))`` for the Brownian kernel, the heat-kernel series
    summed per pair to 1e-12 relative; see the module docstring and docs/theory.md claims C2, C7.
    """
    _check_pair(pi, kernel)
    d = pi.dim
    x = check_points("x", x, d, min_ndim=2)
    if x.ndim != 2:
        raise ValueError(f"'x' must have shape (B, d), got {x.shape}")
    x_pos = check_points("x_pos", x_pos, d)
    if x_pos.shape != x.shape:
        raise ValueError(f"'x_pos' must have the shape of 'x' {x.shape}, got {x_pos.shape}")
    y = check_points("database", database, d)
    if y.ndim != 2:
        raise ValueError(f"'database' must have shape (K, d), got {y.shape}")
    tau = check_scalar("tau", tau, low=TAU_MIN)
    grid = _check_grid(k, y.shape[0])
    n_top = check_int("n_top", n_top, low=1, high=1000)
    a, u, same, kappa, b = _log_m_parts(pi, kernel, x, y)
    heat = _heat_profile(kernel, d) if isinstance(kernel, BrownianKernel) else None
    shift_m = _shift_m(kappa, u, b, heat)
    s0 = np.sum(x * x_pos, axis=1) / tau
    mu = exact.mean_score(kernel, x, tau)
    shift_s = np.full(x.shape[0], 1.0 / tau)  # s <= 1/tau: e^{s - shift} in [e^{-2/tau}, 1]
    sums, top1, overlap = _sums(x, u, same, y, b, tau, kappa, shift_s, shift_m, mu, grid, n_top, x.shape[0],
                                heat)
    log_s = shift_s[:, None] + np.log(sums[..., 0])
    ce = log_s - (sums[..., 2] / sums[..., 1] + mu[:, None])
    loss = np.logaddexp(s0[:, None], log_s) - s0[:, None]
    return {"loss": loss, "ce": ce, "d": loss - ce, "top1": top1, "recall": overlap}


# ----------------------------------------------------------------------------------------------
# the estimator of D_k

@dataclass(frozen=True)
class SearchEstimator:
    """Monte Carlo estimator of ``D_k = R_k - E CE(M_k, Q_k)`` on the grid 1, 2, 4, ..., k_max.

    Parameters
    ----------
    pi : SphereDistribution
        Data distribution with a density (Uniform, VonMisesFisher, VMFMixture).
    kernel : VMFKernel, RotatedVMFKernel or BrownianKernel
        Positive kernel M (m in closed form, or the heat-kernel series summed per pair).
    tau : float
        Temperature, >= 0.005.
    k_max : int
        Database size per block, a power of two >= 2.
    n_top : int
        Retrieved-set size for recall (default 10).

    Notes
    -----
    A block draws ``k_max`` database points, then ``n_anchors`` queries and their positives; the
    database is shared by the block's queries (each query's statistics stay unbiased; the Monte
    Carlo error comes from independent blocks). Per query and k (docs/design.md, "simkit.estimators.search"):
    ``T1 = log(1 + e^{s0}/S_k)``, ``T2 = V_k/W_k - mu_s(x)``, and the estimator
    ``T1 + T2 - sum_c b_c CV_c`` with pilot coefficients b. References: docs/theory.md claim C2.
    """

    pi: SphereDistribution
    kernel: MarkovKernel
    tau: float
    k_max: int
    n_top: int = N_TOP
    grid: NDArray[np.int64] = field(init=False, repr=False)

    def __post_init__(self):
        _check_pair(self.pi, self.kernel)
        object.__setattr__(self, "tau", check_scalar("tau", self.tau, low=TAU_MIN))
        object.__setattr__(self, "grid", k_grid(self.k_max))
        if self.grid[-1] < 2:
            raise ValueError(f"'k_max' must be >= 2, got {self.k_max}")
        object.__setattr__(self, "n_top", check_int("n_top", self.n_top, low=1, high=1000))

    @property
    def dim(self) -> int:
        return self.pi.dim

    def default_coef(self) -> NDArray[np.float64]:
        """Coefficients (G, 6) of the control variates :data:`CONTROL_VARIATES`: the Taylor values."""
        return np.tile(np.asarray(TAYLOR_COEF), (self.grid.size, 1))

    def _draw(self, n: int, rng) -> tuple[NDArray, NDArray, NDArray]:
        y = self.pi.rvs(int(self.grid[-1]), rng=rng)
        x = self.pi.rvs(n, rng=rng)
        xp = self.kernel.sample(x, rng=rng)
        return x, xp, y

    def calibrate(self, n_anchors: int, rng, n_blocks: int = 4) -> NDArray[np.float64]:
        """Control-variate coefficients (G, 6) from an independent pilot of ``n_blocks`` blocks.

        Per k, least squares of ``T1 + T2`` on the control variates with an intercept (the
        variance-minimising coefficients); a control variate that is constant at some k (G at
        k = 1) gets coefficient 0 there. With heavy-tailed density ratios m a least-squares fit
        on a small pilot can *add* variance, so when ``n_blocks >= 2`` the choice is made on
        held-out data: coefficients fitted on the first half of the pilot blocks, the Taylor
        values and no control variates are compared by their variance on the second half, and
        the winner is used (least squares refitted on the whole pilot if it wins). Everything
        depends on the pilot only, so the estimator stays exactly unbiased.
        """
        n = check_int("n_anchors", n_anchors, low=8)
        rng = check_rng(rng)
        nb = check_int("n_blocks", n_blocks, low=1)
        parts = [self._per_anchor(*self._draw(n, rng), n_rank=0) for _ in range(nb)]
        n_cv = len(CONTROL_VARIATES)
        coef = np.zeros((self.grid.size, n_cv))
        taylor = np.asarray(TAYLOR_COEF)

        def stack(ps, g):
            target = np.concatenate([p["T1"][:, g] + p["T2"][:, g] for p in ps])
            cols = np.column_stack([np.concatenate([p["cv"][:, g, c] for p in ps]) for c in range(n_cv)])
            return target, cols

        def least_squares(target, cols):
            have = [bool(np.all(np.isfinite(c)) and np.std(c) > 0) for c in cols.T]
            design = np.column_stack([np.ones_like(target), cols[:, have]])
            beta = np.zeros(n_cv)
            beta[have] = np.linalg.lstsq(design, target, rcond=None)[0][1:]
            return beta

        for g in range(self.grid.size):
            target, cols = stack(parts, g)
            beta = least_squares(target, cols)
            if nb >= 2:
                half = nb // 2
                t_fit, c_fit = stack(parts[:half], g)
                t_out, c_out = stack(parts[half:], g)
                options = [least_squares(t_fit, c_fit), np.where(np.std(c_out, axis=0) > 0, taylor, 0.0),
                           np.zeros(n_cv)]
                var = [np.var(t_out - c_out @ b) for b in options]
                best = int(np.argmin(var))
                if best:
                    beta = options[best]
            coef[g] = beta
        return coef

    def block(self, n_anchors: int, rng, coef: NDArray[np.float64] | None = None, *,
              rank_anchors: int | None = None) -> dict[str, NDArray[np.float64]]:
        """One replicate block: ``n_anchors`` queries sharing ``k_max`` fresh database points.

        Parameters
        ----------
        n_anchors : int
            Queries per block, >= 2.
        rng : numpy.random.Generator, SeedSequence or int
            Randomness of the block.
        coef : ndarray (G, 6), optional
            Control-variate coefficients (from :meth:`calibrate`); Taylor values if omitted.
        rank_anchors : int, optional
            Retrieval metrics use the first ``rank_anchors`` queries (all if omitted).

        Returns
        -------
        dict
            Per-block means over queries named in :data:`SEARCH_STATS`, each an array over the
            k grid (``recall`` NaN where k < n_top).
        """
        n = check_int("n_anchors", n_anchors, low=2)
        n_rank = n if rank_anchors is None else check_int("rank_anchors", rank_anchors, low=1, high=n)
        rng = check_rng(rng)
        coef = self.default_coef() if coef is None else np.asarray(coef, dtype=float)
        if coef.shape != (self.grid.size, len(CONTROL_VARIATES)) or not np.all(np.isfinite(coef)):
            raise ValueError(f"'coef' must be a finite array of shape ({self.grid.size}, {len(CONTROL_VARIATES)})")
        p = self._per_anchor(*self._draw(n, rng), n_rank=n_rank)
        est = p["T1"] + p["T2"] - np.einsum("bgc,gc->bg", p["cv"], coef)
        with np.errstate(invalid="ignore"):
            recall = np.full(self.grid.size, np.nan)
            ok = self.grid >= self.n_top
            recall[ok] = p["recall"][:n_rank, ok].mean(axis=0)
        return {
            "d_cv": est.mean(axis=0),
            "d_rb": (p["T1"] + p["T2"]).mean(axis=0),
            "d_plain": p["plain"].mean(axis=0),
            "d_cv_var": est.var(axis=0, ddof=1),
            "pos_term": p["T1"].mean(axis=0),
            "snis_term": p["T2"].mean(axis=0),
            "loss": p["loss"].mean(axis=0),
            "ce": p["ce"].mean(axis=0),
            "top1": p["top1"][:n_rank].mean(axis=0),
            "recall": recall,
        }

    def _per_anchor(self, x: NDArray, xp: NDArray, y: NDArray, n_rank: int) -> dict[str, NDArray]:
        """Per-query terms, each (B, G) (``cv``: (B, G, 6)); top1/recall NaN beyond ``n_rank``."""
        pi, kernel, tau, grid = self.pi, self.kernel, self.tau, self.grid
        kf = grid.astype(float)
        s0 = np.sum(x * xp, axis=1) / tau
        log_z = exact.log_partition(pi, x, tau)
        log_m1 = exact.log_m1(kernel, x, tau)
        mu = exact.mean_score(kernel, x, tau)
        a, u, same, kappa, b = _log_m_parts(pi, kernel, x, y)
        heat = _heat_profile(kernel, self.dim) if isinstance(kernel, BrownianKernel) else None
        shift_m = _shift_m(kappa, u, b, heat)
        sums, top1, overlap = _sums(x, u, same, y, b, tau, kappa, log_z, shift_m, mu, grid, self.n_top, n_rank,
                                    heat)
        s_t, w_t, v_t, q_t = (sums[..., c] for c in range(N_SUMS))
        e0 = np.exp(s0 - log_z)[:, None]  # e^{s0} / Z
        t1 = np.log1p(e0 / s_t)  # log(1 + e^{s0} / S_k), S_k = Z s_t
        t2 = v_t / w_t  # V_k / W_k - mu_s
        log_s = log_z[:, None] + np.log(s_t)
        ce = log_s - (t2 + mu[:, None])
        loss = np.logaddexp(s0[:, None], log_s) - s0[:, None]
        h = (a + shift_m)[:, None]  # m_j = e^h mt_j
        a_k = s_t / kf - 1.0
        cv = np.empty(s_t.shape + (len(CONTROL_VARIATES),))
        cv[..., 0] = (e0 - np.exp(log_m1 - log_z)[:, None]) / kf
        cv[..., 1] = e0 * a_k / kf
        cv[..., 2] = a_k
        u_k = np.exp(h) * v_t / kf
        wc = np.expm1(h + np.log(w_t) - np.log(kf))
        cv[..., 3] = u_k
        cv[..., 4] = wc
        # off-diagonal part of U_k Wc_k: subtract (1/k^2) sum_j m_j (s_j - mu)(m_j - 1)
        diag = np.exp(h) * (np.exp(h) * q_t - v_t) / kf**2
        g_k = u_k * wc - diag
        g_k[:, kf == 1.0] = 0.0  # no pairs i != j: exactly zero
        cv[..., 5] = g_k
        return {"T1": t1, "T2": t2, "plain": loss - ce, "cv": cv, "loss": loss, "ce": ce,
                "top1": top1, "recall": overlap}


# ----------------------------------------------------------------------------------------------
# the constants of the 1/k expansion

def _cosine_expect(d: int, kappa: float, g, n_nodes: int = 24) -> float:
    """``E g(t)``, t = mu.y for y ~ vMF(mu, kappa) on S^{d-1}: composite Gauss--Legendre in theta.

    The density of theta = arccos t is proportional to ``sin^{d-2}(theta) exp(kappa cos theta)``;
    panels of width at most ``0.25 / sqrt(kappa + d)`` (a quarter of the peak's scale) with
    ``n_nodes`` nodes each, normalised by the rule's own mass (log space, no overflow). Accurate to
    ~1e-12 relative for smooth g (tests/estimators/test_search.py checks it against direct Monte Carlo and
    closed forms).
    """
    n_panels = int(np.ceil(np.pi / (0.25 / np.sqrt(kappa + d))))
    edges = np.linspace(0.0, np.pi, n_panels + 1)
    x, w = np.polynomial.legendre.leggauss(n_nodes)
    a_, b_ = edges[:-1, None], edges[1:, None]
    theta = (0.5 * (b_ - a_) * x + 0.5 * (b_ + a_)).ravel()
    lw = np.log((0.5 * (b_ - a_) * w).ravel()) + kappa * np.cos(theta)
    if d > 2:
        lw += (d - 2) * np.log(np.sin(theta))
    wt = np.exp(lw - lw.max())
    return float(np.sum(wt * g(np.cos(theta))) / np.sum(wt))

def search_constants(pi: SphereDistribution, kernel: MarkovKernel, tau: float, *,
                     n_mc: int = exact.DEFAULT_MC_SIZE, rng=None) -> dict[str, tuple[float, float]]:
    """The predicted constant d1 of ``D_k = d1/k + O(1/k^2)`` and the scales of its expansion.

    Parameters
    ----------
    pi, kernel, tau
        As for :class:`SearchEstimator`.
    n_mc : int
        Monte Carlo size over (x, y ~ M(x)) where no exact formula is used.
    rng
        Randomness of that Monte Carlo: required where it is used (no hidden default seed; a study
        passes its task's rng, so the constant's Monte Carlo error varies with the study seed).

    Returns
    -------
    dict
        ``name -> (value, mcse)`` (mcse 0 where exact) for

        * ``d1`` -- ``E_x[m1(x)/Z(x)] - E_x Cov_{y~M(x)}(m(x, y), s(x, y))``;
        * ``pos`` -- ``E_x[m1/Z]`` (the positive's share of d1) and ``snis`` -- ``E_x Cov_M(m, s)``
          (the self-normalisation bias, entering d1 with a minus sign);
        * ``w2`` -- ``E_x E_{y~M(x)} m(x, y) = E_x E_{y~pi} m(x, y)^2``: the second moment of the
          importance weights, the expansion scale of V_k/W_k (the ratio's relative variance is
          (w2 - 1)/k).

    Notes
    -----
    *Derived here* by the first-order delta method: ``E log(1 + e^{s0}/S_k) = m1/(kZ) + O(1/k^2)``
    and ``E[V_k/W_k] - mu_s = -(1/k) E_pi[m^2 (s - mu_s)] + O(1/k^2)`` (the bias of a
    self-normalised importance-sampling estimate), with ``E_pi[m^2 (s - mu_s)] = Cov_M(m, s)``.
    Exact by 1-D quadrature for uniform pi with the vMF kernel (m depends on x.y only, as does
    s); Monte Carlo over x ~ pi, y ~ M(x) with exact m, m1, Z and mu_s otherwise.
    """
    _check_pair(pi, kernel)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    n_mc = check_int("n_mc", n_mc, low=2)
    d = pi.dim
    if isinstance(pi, Uniform) and isinstance(kernel, VMFKernel):
        kap = kernel.kappa
        lc, lc0, lc2 = (float(log_vmf_norm(d, v)) for v in (kap, 0.0, 2.0 * kap))
        x0 = np.eye(d)[:1]
        pos = float(np.exp(exact.log_m1(kernel, x0, tau) - exact.log_partition(pi, x0, tau))[0])
        a_d = float(mean_resultant_length(d, kap))
        # under M, t = x.x+ has the vMF cosine law; m = e^{lc - lc0 + kap t}, s - mu_s = (t - A_d)/tau
        snis = _cosine_expect(d, kap, lambda t: np.exp(lc - lc0 + kap * t) * (t - a_d) / tau)
        w2 = float(np.exp(2.0 * lc - lc0 - lc2))
        return {"d1": (pos - snis, 0.0), "pos": (pos, 0.0), "snis": (float(snis), 0.0), "w2": (w2, 0.0)}
    if rng is None:
        raise ValueError("'rng' is required: search_constants needs Monte Carlo over (x, y) for this pi and kernel")
    rng = check_rng(rng)
    x = pi.rvs(n_mc, rng=rng)
    y = kernel.sample(x, rng=rng)
    m = np.exp(exact.log_m(pi, kernel, x, y))
    pos = np.exp(exact.log_m1(kernel, x, tau) - exact.log_partition(pi, x, tau))
    cov = m * (np.sum(x * y, axis=1) / tau - exact.mean_score(kernel, x, tau))
    out = {}
    for name, v in (("d1", pos - cov), ("pos", pos), ("snis", cov), ("w2", m)):
        out[name] = (float(v.mean()), float(v.std(ddof=1) / np.sqrt(n_mc)))
    return out
