"""Claim C4: loss differences are controlled by softmax *averages* over the negatives, not their max.

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        C4 (THEORY.md section 3, Prop. 4): the Gateaux derivative of the log-sum-exp in l_k along
           a perturbation h of the embedding is a softmax-weighted average of h over the negatives,
           so |l_k(psi) - l_k(phi)| is bounded by a softmax average of ||phi(x-_i) - psi(x-_i)||,
           which does not grow with k; the standard Lipschitz argument gives the max over the k
           negatives, which does.
Data       Pairs (phi, psi) of embeddings S^{p-1} -> S^{d-1}: phi random from its family's
           initialisation (a fresh pair per replicate block), psi = phi with its parameter vector
           moved by eps ||theta|| along a uniformly random unit direction, for several eps. Tuples
           (x, x+, x-_1..x-_K), x ~ pi, x+ ~ vMF(x, kappa_M), negatives i.i.d. from pi, independent
           across tuples; every k = 1, 2, 4, ..., K uses the first k negatives (common random numbers).
           Settings: a two-layer tanh embedding in d = 16 with uniform pi, and a linear embedding in
           d = 16 with the vMF mixture pi of simkit.designs.
Estimand   Per tuple and k: |l_k(psi) - l_k(phi)|, the averaging bound B_avg and the max bound
           B_max (below); their means over tuples and pairs as functions of k; the ratios
           E B_max / E B_avg, E B_avg / E|dl|, E B_max / E|dl|.
Methods    Exact evaluation per tuple (running log-sum-exp over the negatives, so every k of the
           grid comes from one pass); validity counted on every tuple; slope of log E[B] on log k
           over k >= k_fit_min (WLS, statsmodels, with delete-one-block jackknife SE: simkit.analysis
           .fit_rate); ratios of means with jackknife MCSE.
Performance  Violations (must be 0 for every bound: a deterministic check of proved inequalities);
           slope of the averaging bound with a two-sided t test of slope = 0 at level ALPHA and its
           detectable slope (power); slope of the max bound with a one-sided t test of slope <= 0
           at level ALPHA; every mean and ratio with its MCSE.

The bounds (derived here; notation of THEORY.md section 1)
----------------------------------------------------------
Fix a tuple and write u = phi(x), v = phi(x+), w_j = phi(x-_j), and u', v', w'_j for psi; all are
unit vectors. With r_j = s(x, x-_j) - s(x, x+) = u.(w_j - v)/tau,

    l_k = -s_0 + log(e^{s_0} + sum_j e^{s_j}) = log(1 + sum_{j<=k} e^{r_j}) =: G(r),

a function of the score differences r only, convex (log-sum-exp of (0, r_1, ..., r_k)).

*Gateaux derivative.* dG(r)[h] = sum_j P_j h_j with P_j = e^{r_j} / (1 + sum_i e^{r_i}) (j >= 1),
the softmax weights of the negatives, with sum_j P_j = 1 - P_0 <= 1. Along a perturbation of the
embedding, phi -> phi + t h, dr_j/dt = [h(x).(w_j - v) + u.(h(x-_j) - h(x+))]/tau, so

    d/dt l_k(phi + t h) |_{t=0} = (1/tau) sum_j P_j [h(x).(w_j - v) + u.(h(x-_j) - h(x+))]:

a softmax-weighted *average* of h over the negatives (plus anchor and positive terms).

*Integration along the segment.* Join r (phi) to r' (psi) by r(t) = r + t (r' - r), t in [0, 1].
g(t) = G(r(t)) is convex, so g' is non-decreasing and

    dG(r)[r' - r] = g'(0) <= l_k(psi) - l_k(phi) = int_0^1 g'(t) dt <= g'(1) = dG(r')[r' - r].

Hence, with P and P' the softmax weights under phi and psi (no intermediate point is needed),

    |l_k(psi) - l_k(phi)| <= B_score := max_{Q in {P, P'}} sum_{j<=k} Q_j |r'_j - r_j|.        (1)

*From scores to embeddings.* tau (r'_j - r_j) = (u' - u).(w'_j - v') + u.((w'_j - w_j) - (v' - v)),
and |w'_j - v'| <= 2, |u| = 1, so tau |r'_j - r_j| <= 2 |du| + |dv| + |dw_j| with du = u' - u,
dv = v' - v, dw_j = w'_j - w_j. Put into (1), with q_j = Q_j / (1 - Q_0) the weights renormalised
over the negatives and 1 - Q_0 <= 1:

    |dl| <= B_avg := (1/tau) [ 2 |du| + |dv| + max_{q in {p, p'}} sum_{j<=k} q_j |dw_j| ],      (AVG)
    q_j = e^{s(x, x-_j)} / sum_{i<=k} e^{s(x, x-_i)}   (p under phi, p' under psi).

*The max bound* (standard Lipschitz argument): G is 1-Lipschitz for the sup norm of r (its
gradient P has l1 norm <= 1), so |dl| <= max_j |r'_j - r_j|, i.e.

    |dl| <= B_max := (1/tau) [ 2 |du| + |dv| + max_{j<=k} |dw_j| ].                                (MAX)

B_score <= B_avg <= B_max always (an average is at most a maximum); B_avg and B_max share the
anchor/positive term and differ only in averaging versus maximising ||phi(x-_j) - psi(x-_j)|| over
the negatives. As k grows, sum_j q_j |dw_j| converges to the Q^phi(x, .)-average of |phi - psi|
(a ratio estimator: bias O(1/k)), while max_j |dw_j| grows like the maximum of k draws until it
reaches the essential supremum. Both bounds are proved, so the study checks them on every tuple
(up to a rounding allowance of TOL_ABS + TOL_REL |l_k|) and compares how their means scale in k.

Run it: ``simkit run continuity`` or ``python studies/continuity.py`` (same options).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike, NDArray
from scipy import stats
from threadpoolctl import threadpool_limits

from simkit import VMFKernel
from simkit.analysis import combine_verdicts, fit_rate, jackknife, mean_mcse
from simkit.designs import MIXTURE_SEED, MIXTURE_WEIGHTS, build_pi
from simkit.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.infonce import k_grid
from simkit.runner import Check, Param, Study, Var

__all__ = ["loss_difference_bounds", "violations", "perturb", "SETTINGS", "SCHEMA", "STUDY", "ALPHA"]

#: level of each per-(setting, eps) test (flatness two-sided, growth one-sided)
ALPHA = 1e-3
#: a bound counts as violated when |dl| > B + TOL_ABS + TOL_REL |l_k| (rounding of the loss difference
#: is ~1e-15 |l_k|; the allowance is ~1000 times that)
TOL_ABS, TOL_REL = 1e-12, 1e-12
#: anchors processed at once (bounds memory: chunk x K x d floats per array)
_CHUNK = 8

#: name -> (embedding family, p, d, hidden width, pi family, kappa_pi, kappa_M, tau)
SETTINGS = {
    "twolayer-d16": ("two_layer", 16, 16, 32, "uniform", 0.0, 20.0, 0.5),
    "linear-d16": ("linear", 16, 16, 0, "mixture", 6.0, 20.0, 0.5),
}

#: per-block variables over (eps, k) and what they are
_EK = ("eps", "k")
BLOCK_VARS = {
    "dl": "mean over the block's tuples of |l_k(psi) - l_k(phi)|",
    "bound_score": "mean of B_score (score-level averaging bound (1))",
    "bound_avg": "mean of B_avg (averaging bound AVG)",
    "bound_max": "mean of B_max (max bound MAX)",
    "neg_avg": "mean of max_{q in {p, p'}} sum_j q_j |dw_j| (softmax average over the negatives)",
    "neg_max": "mean of max_{j <= k} |dw_j|",
    "viol_score": "number of tuples with |dl| above B_score (+ rounding allowance)",
    "viol_avg": "number of tuples with |dl| above B_avg (+ rounding allowance)",
    "viol_max": "number of tuples with |dl| above B_max (+ rounding allowance)",
    "tight_score": "largest |dl| / B_score over the block's tuples",
    "tight_avg": "largest |dl| / B_avg over the block's tuples",
    "tight_max": "largest |dl| / B_max over the block's tuples",
}
_E = ("eps",)
BLOCK_VARS_E = {
    "anchor_term": "mean of 2 |phi(x) - psi(x)| + |phi(x+) - psi(x+)|",
    "neg_plain": "mean over all K negatives of |phi(x-) - psi(x-)| (unweighted)",
    "param_dist": "||theta_psi - theta_phi|| (= eps ||theta_phi||)",
}


# ----------------------------------------------------------------------------------------------
# the bounds

def _running_lse(a: NDArray) -> NDArray:
    """log sum_{j<=k} e^{a_j} for every prefix along the last axis (stable for any magnitudes)."""
    return np.logaddexp.accumulate(a, axis=-1)


def loss_difference_bounds(u: ArrayLike, v: ArrayLike, w: ArrayLike, u2: ArrayLike, v2: ArrayLike, w2: ArrayLike,
                           tau: float, ks: ArrayLike | None = None) -> dict[str, NDArray[np.float64]]:
    """|l_k(psi) - l_k(phi)| and its averaging and max bounds for every tuple and every k (see the module notes).

    Parameters
    ----------
    u, v : array_like, shape (N, d)
        phi of the anchors and of the positives (unit vectors, last axis).
    w : array_like, shape (N, K, d)
        phi of each tuple's K negatives.
    u2, v2, w2 : array_like
        The same under psi.
    tau : float
        Temperature, > 0.
    ks : array_like of int, optional
        Numbers of negatives k (1 <= k <= K); the first k negatives of each tuple are used.
        Default: every k = 1..K.

    Returns
    -------
    dict of ndarray, each (N, G) unless stated
        ``loss`` (l_k under phi), ``delta`` (signed l_k(psi) - l_k(phi)), ``bound_score`` (1),
        ``bound_avg`` (AVG), ``bound_max`` (MAX), ``neg_avg`` (the softmax average of |dw| over
        the negatives, larger of the two endpoints), ``neg_max`` (max_{j<=k} |dw_j|), and
        ``anchor_term`` (N,), ``2 |du| + |dv|``.

    Notes
    -----
    Everything is computed with running log-sum-exp over the negatives, so any tau is safe.
    The proofs are in the module docstring; tests/test_continuity.py checks them against direct
    evaluations and on adversarial pairs.
    """
    u, v, u2, v2 = (np.asarray(a, dtype=float) for a in (u, v, u2, v2))
    w, w2 = np.asarray(w, dtype=float), np.asarray(w2, dtype=float)
    if w.ndim != 3 or u.shape != (w.shape[0], w.shape[2]):
        raise ValueError(f"'w' must have shape (N, K, d) with u of shape (N, d), got {w.shape} and {u.shape}")
    for name, a, b in (("v", v, u), ("u2", u2, u), ("v2", v2, u), ("w2", w2, w)):
        if a.shape != b.shape:
            raise ValueError(f"'{name}' must have shape {b.shape}, got {a.shape}")
    if not (isinstance(tau, (int, float, np.floating)) and math.isfinite(tau) and tau > 0):
        raise ValueError(f"'tau' must be a finite number > 0, got {tau!r}")
    K = w.shape[1]
    idx = np.arange(K) if ks is None else np.asarray(ks, dtype=np.int64) - 1
    if idx.ndim != 1 or idx.size == 0 or idx.min() < 0 or idx.max() >= K:
        raise ValueError(f"'ks' must hold numbers of negatives in 1..{K}, got {ks!r}")

    r = np.einsum("nd,nkd->nk", u, w - v[:, None, :]) / tau  # s_j - s_0
    r2 = np.einsum("nd,nkd->nk", u2, w2 - v2[:, None, :]) / tau
    dw = np.sqrt(np.sum((w2 - w) ** 2, axis=-1))  # (N, K)
    anchor = 2.0 * np.sqrt(np.sum((u2 - u) ** 2, axis=-1)) + np.sqrt(np.sum((v2 - v) ** 2, axis=-1))
    with np.errstate(divide="ignore"):  # log 0 = -inf is exact here: a zero term of a sum
        log_dw, log_dr = np.log(dw), np.log(np.abs(r2 - r))
    lse, lse2 = _running_lse(r)[:, idx], _running_lse(r2)[:, idx]  # log sum_{j<=k} e^{r_j}
    loss, loss2 = np.logaddexp(0.0, lse), np.logaddexp(0.0, lse2)  # l_k = log(1 + sum e^{r_j})
    # softmax averages: over the negatives only (q) for AVG, including the positive (P) for (1)
    neg_avg = np.maximum(np.exp(_running_lse(r + log_dw)[:, idx] - lse),
                         np.exp(_running_lse(r2 + log_dw)[:, idx] - lse2))
    score = np.maximum(np.exp(_running_lse(r + log_dr)[:, idx] - loss),
                       np.exp(_running_lse(r2 + log_dr)[:, idx] - loss2))
    neg_max = np.maximum.accumulate(dw, axis=-1)[:, idx]
    return {"loss": loss, "delta": loss2 - loss, "bound_score": score,
            "bound_avg": (anchor[:, None] + neg_avg) / tau, "bound_max": (anchor[:, None] + neg_max) / tau,
            "neg_avg": neg_avg, "neg_max": neg_max, "anchor_term": anchor}


def violations(delta: NDArray, bound: NDArray, loss: NDArray) -> NDArray[np.bool_]:
    """True where |delta| exceeds ``bound`` by more than the rounding allowance TOL_ABS + TOL_REL |loss|."""
    return np.abs(delta) > bound + TOL_ABS + TOL_REL * np.abs(loss)


def perturb(phi, eps: float, *, rng):
    """psi = phi with parameters ``theta + eps ||theta|| e``, e uniform on the unit sphere of R^{n_params}
    drawn from ``rng`` (a seed or a numpy Generator; required: no hidden default seed)."""
    if not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"'eps' must be a finite number >= 0, got {eps!r}")
    if rng is None:
        raise ValueError("'rng' is required: pass a seed or a numpy Generator (e.g. the study task's rng)")
    rng = np.random.default_rng(rng)
    e = rng.standard_normal(phi.n_params)
    e /= np.linalg.norm(e)
    return phi.with_params(phi.params + eps * np.linalg.norm(phi.params) * e)


# ----------------------------------------------------------------------------------------------
# the dataset's variables

S, SE, SEK, SBE, SBEK = ("setting",), ("setting", "eps"), ("setting", "eps", "k"), ("setting", "block", "eps"), \
    ("setting", "block", "eps", "k")
NATS = "in nats (dimensionless, udunits '1')"
#: the per-block means summarised over blocks, with the bounds' and losses' unit note
_MEANS = ("dl", "bound_score", "bound_avg", "bound_max", "neg_avg", "neg_max")
#: ratios of means (jackknife MCSE): name -> (numerator, denominator, long name)
RATIOS = {"ratio_max_avg": ("bound_max", "bound_avg", "E B_max / E B_avg"),
          "ratio_avg_dl": ("bound_avg", "dl", "E B_avg / E |dl|"),
          "ratio_max_dl": ("bound_max", "dl", "E B_max / E |dl|"),
          "ratio_score_dl": ("bound_score", "dl", "E B_score / E |dl|"),
          "ratio_negmax_negavg": ("neg_max", "neg_avg", "E max_j |dw_j| / E softmax-average |dw|")}
#: slope fits of log mean on log k: name -> (per-block variable, what is fitted); "max" and
#: "negmax" are tested one-sided (H0: slope <= 0), the others two-sided (H0: slope = 0)
SLOPES = {"avg": ("bound_avg", "mean B_avg"), "max": ("bound_max", "mean B_max"),
          "negavg": ("neg_avg", "mean softmax average of |dw|"), "negmax": ("neg_max", "mean max_j |dw_j|"),
          "score": ("bound_score", "mean B_score"), "dl": ("dl", "mean |dl|")}
_ONE_SIDED = ("max", "negmax")


def _in_nats(name: str) -> bool:
    return name.startswith(("dl", "bound"))


def _mean_var(name: str, dims: tuple, text: str) -> dict:
    short = text.replace("mean over the block's tuples of ", "").replace("mean of ", "")
    nats = ", in nats" if _in_nats(name) else ""
    return {name: Var(dims, f"mean {short}{nats}" if dims == SEK else name.replace("_", " "), "1",
                      f"mean over tuples and blocks; {text}" if dims == SEK else text),
            f"{name}_mcse": Var(dims, f"MCSE of {name}{nats}", "1", "sd over blocks / sqrt(n_blocks)")}


def _slope_vars(name: str, text: str) -> dict:
    sided = "one-sided, H0: slope <= 0" if name in _ONE_SIDED else "two-sided, H0: slope = 0"
    return {f"slope_{name}": Var(SE, f"slope of log {text} on log k", "1", "WLS over k >= k_fit_min, "
                                 "delete-one-block jackknife"),
            f"slope_{name}_se": Var(SE, f"jackknife SE of slope_{name}", "1", "delete-one-block jackknife"),
            f"slope_{name}_p": Var(SE, f"p-value for slope_{name}", "1", f"Student t with n_blocks - 1 df, {sided}"),
            f"slope_{name}_detect50": Var(SE, f"slope detected with probability 1/2 ({text})", "1",
                                          f"critical t at level {ALPHA:g} times the SE"),
            f"slope_{name}_detect80": Var(SE, f"slope detected with probability 0.8 ({text})", "1",
                                          "(critical t + z_0.8) times the SE")}


#: every variable and coordinate of the dataset (the runner adds block, cell_error and cell_key)
SCHEMA = {
    "setting": Var(S, "design setting", "1", "name in studies/continuity.py SETTINGS"),
    "family": Var(S, "embedding family", "1", "linear: Wx/|Wx|; two_layer: normalize(W2 tanh(W1 x + b1))"),
    "p": Var(S, "input dimension p", "1", "points on S^{p-1}"),
    "d": Var(S, "embedding dimension d", "1", "S^{d-1}"),
    "hidden": Var(S, "hidden width m", "1", "0 for the linear family"),
    "pi": Var(S, "data distribution family", "1", f"uniform or mixture (simkit.designs: weights {MIXTURE_WEIGHTS}, "
              f"means from seed {MIXTURE_SEED})"),
    "kappa_pi": Var(S, "concentration of pi", "1", "vMF concentration of each mixture component"),
    "kappa_m": Var(S, "kernel concentration kappa_M", "1", "x+ ~ vMF(x, kappa_M)"),
    "tau": Var(S, "temperature tau", "1", "s(x, y) = phi(x).phi(y)/tau"),
    "eps": Var(("eps",), "relative parameter perturbation eps", "1", "theta_psi = theta_phi + eps ||theta_phi|| e"),
    "k": Var(("k",), "number of negatives k", "1", "geometric grid 1, 2, 4, ..., k_max; the first k of K negatives"),
    **{f"raw_{n}": Var(SBEK, f"per-block {n}{', in nats' if _in_nats(n) else ''}", "1",
                       text + (f"; {NATS}" if _in_nats(n) else "")) for n, text in BLOCK_VARS.items()},
    **{f"raw_{n}": Var(SBE, f"per-block {n}", "1", text) for n, text in BLOCK_VARS_E.items()},
    **{k: v for n in _MEANS for k, v in _mean_var(n, SEK, BLOCK_VARS[n]).items()},
    **{k: v for n, text in BLOCK_VARS_E.items() for k, v in _mean_var(n, SE, text).items()},
    **{f"violations_{t}": Var(SEK, f"tuples violating B_{t}", "1", "count over all blocks (attrs['tuples_per_k'] "
                              "tuples per k and eps)") for t in ("score", "avg", "max")},
    **{f"tightness_{t}": Var(SEK, f"largest |dl| / B_{t} over tuples", "1", "at most 1 when the bound holds; near "
                             "1: tight on some tuple") for t in ("score", "avg", "max")},
    **{k: v for name, (_, _, ln) in RATIOS.items() for k, v in {
        name: Var(SEK, ln, "1", "ratio of means over tuples and blocks"),
        f"{name}_mcse": Var(SEK, f"MCSE of {name}", "1", "delete-one-block jackknife")}.items()},
    **{k: v for name, (_, text) in SLOPES.items() for k, v in _slope_vars(name, text).items()},
    "verdict": Var(SE, "verdict for C4", "1", f"pass when no tuple violates any bound, the two-sided test of zero "
                   f"slope for B_avg is not rejected at {ALPHA:g} and the one-sided test of positive slope for B_max "
                   f"rejects at {ALPHA:g}; error when a task failed"),
    "verdict_reason": Var(SE, "why a cell failed", "1", "empty when it passed"),
}


# ----------------------------------------------------------------------------------------------
# summaries

def _ratio(num: np.ndarray, den: np.ndarray) -> tuple[float, float]:
    """Ratio of block means with its delete-one-block jackknife MCSE over the finite blocks (NaN if < 3)."""
    blocks = np.stack([num, den], axis=1)
    blocks = blocks[np.all(np.isfinite(blocks), axis=tuple(range(1, blocks.ndim)))]
    if blocks.shape[0] < 3:
        return np.full(num.shape[1:], np.nan), np.full(num.shape[1:], np.nan)
    f, j, _ = jackknife(lambda m: m[0] / m[1], blocks)
    return f, j


def _slope(k: np.ndarray, blocks: np.ndarray, k_min: int, one_sided: bool) -> tuple[float, ...]:
    """(slope, SE, p-value, slope detected with probability 1/2, with probability 0.8) of log mean on log k."""
    fit = fit_rate(k, blocks, k_min, with_inverse=False)
    b, se = fit.slope, fit.slope_se
    if not (np.isfinite(b) and se > 0):
        return b, se, np.nan, np.nan, np.nan
    p = stats.t.sf(b / se, fit.df) if one_sided else 2 * stats.t.sf(abs(b / se), fit.df)
    q = stats.t.isf(ALPHA if one_sided else ALPHA / 2, fit.df)
    return b, se, p, q * se, (q + stats.norm.isf(0.2)) * se


def _slope_problems(p_avg: float, p_max: float, b_avg: float, b_max: float) -> list[str]:
    """The statistical part of a cell's verdict: B_avg flat (two-sided), B_max growing (one-sided)."""
    if not np.isfinite(p_avg) or not np.isfinite(p_max):
        return ["slope fit failed (too few blocks or non-positive means)"]
    out = []
    if p_avg < ALPHA:
        out.append(f"B_avg slope {b_avg:.2e} != 0 (p = {p_avg:.2g})")
    if not p_max < ALPHA:
        out.append(f"B_max growth not detected (slope {b_max:.2e}, p = {p_max:.2g})")
    return out


def _cell_verdict(viol: dict, slope_probs: list[str], error: str) -> tuple[str, str]:
    probs = [f"B_{t} violated on {n} (tuple, k) pairs" for t, n in viol.items() if n] + slope_probs
    if error:
        return "error", "; ".join(["a task failed (see cell_error)", *probs])
    return ("pass" if not probs else "fail"), "; ".join(probs)


# ----------------------------------------------------------------------------------------------
# claim checks (claim rows of simkit validate)

def _n_violations(ds: xr.Dataset) -> int:
    return int(sum(int(ds[f"violations_{t}"].values.sum()) for t in ("avg", "max", "score")))


def _bounds_check(ds: xr.Dataset) -> dict:
    """Deterministic: B_score, B_avg and B_max are proved bounds, so no tuple may violate them."""
    n = _n_violations(ds)
    errors = "error" in [str(v) for v in ds["verdict"].values.ravel()]
    detail = (f"{n} bound violations over {int(ds.attrs.get('tuples_per_k', 0))} tuples x {ds.sizes['k']} k x "
              f"{ds.sizes['eps']} eps x {ds.sizes['setting']} settings; largest |dl|/B_avg "
              f"{float(np.nanmax(ds['tightness_avg'].values)):.3g}, |dl|/B_max "
              f"{float(np.nanmax(ds['tightness_max'].values)):.3g}")
    return {"estimate": n, "estimate_mcse": 0.0, "verdict": "error" if errors else ("fail" if n else "pass"),
            "detail": detail}


def _slopes_check(ds: xr.Dataset) -> dict:
    """Statistical: per (setting, eps), B_avg flat and B_max growing; estimate the B_avg slope farthest from 0."""
    b, se = ds["slope_avg"].values, ds["slope_avg_se"].values
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(np.isfinite(b), np.abs(b) / se, np.inf)
    worst = np.unravel_index(int(np.argmax(z)), z.shape)
    verdicts, parts = [], []
    for i, s in enumerate(ds["setting"].values):
        for j, e in enumerate(ds["eps"].values):
            probs = _slope_problems(*(float(ds[n].values[i, j]) for n in ("slope_avg_p", "slope_max_p", "slope_avg",
                                                                          "slope_max")))
            v = "error" if str(ds["verdict"].values[i, j]) == "error" else ("fail" if probs else "pass")
            verdicts.append(v)
            parts.append(f"{s} eps {e:g}: B_avg slope {b[i, j]:.2e} ± {se[i, j]:.1e}, B_max slope "
                         f"{ds['slope_max'].values[i, j]:.3f} ± {ds['slope_max_se'].values[i, j]:.3f}, "
                         f"B_max/B_avg at k = {int(ds['k'].values[-1])}: {ds['ratio_max_avg'].values[i, j, -1]:.3f} "
                         f"-> {v}" + (f" ({'; '.join(probs)})" if probs else ""))
    return {"estimate": b[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(verdicts),
            "detail": "; ".join(parts)}


CHECKS = (
    Check("C4", lambda ds: f"deterministic check: no tuple violates B_score, B_avg or B_max at any k (proved bounds; "
                           f"rounding allowance {TOL_ABS:g} + {TOL_REL:g} |l_k|), "
                           f"{ds.sizes['setting'] * ds.sizes['eps']} (setting, eps) cells; estimate: the number of "
                           f"violations",
          _bounds_check, None),
    Check("C4", lambda ds: f"per (setting, eps), {ds.sizes['setting'] * ds.sizes['eps']} cells: slope of log E B_avg "
                           f"on log k = 0 not rejected (two-sided, {ALPHA:g}); slope of log E B_max > 0 detected "
                           f"(one-sided, {ALPHA:g})",
          _slopes_check, lambda ds: 1.0 - (1.0 - ALPHA) ** (ds.sizes["setting"] * ds.sizes["eps"])),
)


def _parse_eps(text: str) -> list[float]:
    try:
        vals = [float(t) for t in str(text).split(",")]
    except ValueError:
        raise ValueError(f"'eps' must be comma-separated numbers, e.g. 0.01,0.1,0.5, got {text!r}") from None
    if not vals or any(not (math.isfinite(e) and 0 < e <= 1) for e in vals):
        raise ValueError(f"'eps' must be numbers in (0, 1], got {text!r}")
    if len(set(vals)) != len(vals):
        raise ValueError(f"'eps' must not repeat a value, got {text!r}")
    return sorted(vals)


# ----------------------------------------------------------------------------------------------
# the study

class Continuity(Study):
    name = "continuity"
    claim = "C4"
    title = "Claim C4: softmax averages, not maxima, bound InfoNCE loss differences"
    cell_dim = "setting"
    schema = SCHEMA
    checks = CHECKS
    ademp = {
        "aim": "C4 (Prop. 4): |l_k(phi) - l_k(psi)| is bounded by a softmax-weighted average of "
               "||phi(x-_i) - psi(x-_i)|| over the negatives (flat in k); the Lipschitz bound with the max grows "
               "with k",
        "data": "pairs (phi, psi = phi with parameters moved by eps ||theta|| in a random direction); two-layer tanh "
                "embedding d = 16 with uniform pi, linear embedding d = 16 with a vMF mixture pi; vMF positives; "
                "K i.i.d. negatives per tuple, every k = 1, 2, ..., K from the first k (common random numbers)",
        "estimand": "per tuple |dl|, B_avg, B_max; their means over tuples and pairs as functions of k; ratios of "
                    "means",
        "methods": "exact per-tuple evaluation with running log-sum-exp; WLS slope of log mean bound on log k over "
                   "k >= k_fit_min with delete-one-block jackknife SE; ratios with jackknife MCSE",
        "performance": "violations on every tuple (must be 0); two-sided t test of zero slope for B_avg and its "
                       "detectable slope; one-sided t test of positive slope for B_max; MCSE of every mean and ratio",
    }
    params = {
        "settings": Param("settings", str, "twolayer-d16,linear-d16", "comma-separated settings",
                          choices=tuple(SETTINGS), multi=True),
        "eps": Param("eps", str, "0.01,0.1,0.5", "comma-separated relative parameter perturbations eps in (0, 1]"),
        "k_max": Param("k_max", int, 4096, "negatives per tuple K (power of two); grid k = 1, 2, 4, ..., K",
                       low=16, high=1 << 16, power_of_two=True, quick=2048),
        "k_fit_min": Param("k_fit_min", int, 16, "smallest k in the slope fits (power of two)", low=1,
                           high=1 << 16, power_of_two=True),
        "n_blocks": Param("n_blocks", int, 32, "independent replicate blocks (a fresh pair phi, psi each)",
                          low=4, high=100000, quick=16),
        "block_anchors": Param("block_anchors", int, 32, "tuples per block", low=1, high=1 << 16, quick=16),
        "tau": Param("tau", float, None, "override the temperature of every setting", low=0.01),
    }

    def check_config(self, cfg):
        _parse_eps(cfg["eps"])
        if cfg["k_fit_min"] * 8 > cfg["k_max"]:
            raise ValueError(f"'k_fit_min' must be <= k_max / 8 = {cfg['k_max'] // 8} (at least 4 grid points in "
                             f"the fit), got {cfg['k_fit_min']}")

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            fam, p, d, m, pi, kp, km, tau = SETTINGS[name]
            out.append({"setting": name, "family": fam, "p": p, "d": d, "hidden": m, "pi": pi, "kappa_pi": kp,
                        "kappa_m": km, "tau": float(cfg["tau"] if cfg["tau"] is not None else tau)})
        return out

    def block_dims(self, cfg):
        dims = {name: _EK for name in BLOCK_VARS}
        dims.update({name: _E for name in BLOCK_VARS_E})
        return dims, {"eps": np.array(_parse_eps(cfg["eps"])), "k": k_grid(cfg["k_max"])}

    @staticmethod
    def _embedding(cell, rng):
        if cell["family"] == "linear":
            return LinearEmbedding.random(cell["p"], cell["d"], rng=rng)
        return TwoLayerEmbedding.random(cell["p"], cell["d"], cell["hidden"], rng=rng)

    def generate(self, cell, cfg, prep, rng):
        """One block: a pair per eps (phi shared), block_anchors tuples with K negatives each.

        Draw order: phi, one direction per eps, anchors, positives, then the negatives chunk by chunk.
        """
        eps = _parse_eps(cfg["eps"])
        K, N, tau = cfg["k_max"], cfg["block_anchors"], cell["tau"]
        ks = k_grid(K)
        pi = build_pi({"pi": cell["pi"], "dim": cell["p"], "kappa_pi": cell["kappa_pi"]})
        kernel = VMFKernel(cell["kappa_m"])
        phi = self._embedding(cell, rng)
        psis = [perturb(phi, e, rng=rng) for e in eps]
        x = pi.rvs(N, rng=rng)
        xp = kernel.sample(x, rng=rng)
        E, G = len(eps), ks.size
        sums = {n: np.zeros((E, G)) for n in ("dl", "bound_score", "bound_avg", "bound_max", "neg_avg", "neg_max")}
        counts = {n: np.zeros((E, G)) for n in ("viol_score", "viol_avg", "viol_max")}
        tight = {n: np.zeros((E, G)) for n in ("tight_score", "tight_avg", "tight_max")}
        anchor, plain = np.zeros(E), np.zeros(E)
        d = cell["d"]
        with threadpool_limits(limits=1, user_api="blas"):  # skinny products: threads only add overhead
            for lo in range(0, N, _CHUNK):
                hi = min(N, lo + _CHUNK)
                y = pi.rvs((hi - lo) * K, rng=rng)
                u, v, w = phi(x[lo:hi]), phi(xp[lo:hi]), phi(y).reshape(hi - lo, K, d)
                for i, psi in enumerate(psis):
                    w2 = psi(y).reshape(hi - lo, K, d)
                    b = loss_difference_bounds(u, v, w, psi(x[lo:hi]), psi(xp[lo:hi]), w2, tau, ks)
                    dl = np.abs(b["delta"])
                    for name in ("bound_score", "bound_avg", "bound_max", "neg_avg", "neg_max"):
                        sums[name][i] += b[name].sum(axis=0)
                    sums["dl"][i] += dl.sum(axis=0)
                    for tag in ("score", "avg", "max"):
                        bound = b[f"bound_{tag}"]
                        counts[f"viol_{tag}"][i] += violations(b["delta"], bound, b["loss"]).sum(axis=0)
                        with np.errstate(invalid="ignore", divide="ignore"):
                            ratio = np.where(bound > 0, dl / bound, 0.0)
                        tight[f"tight_{tag}"][i] = np.maximum(tight[f"tight_{tag}"][i], ratio.max(axis=0))
                    anchor[i] += b["anchor_term"].sum()
                    plain[i] += np.sqrt(np.sum((w2 - w) ** 2, axis=-1)).mean(axis=1).sum()
        out = {n: s / N for n, s in sums.items()}
        out.update(counts)
        out.update(tight)
        out["anchor_term"] = anchor / N
        out["neg_plain"] = plain / N
        out["param_dist"] = np.array([np.linalg.norm(psi.params - phi.params) for psi in psis])
        return out

    def summarise(self, raw: xr.Dataset, cfg) -> dict:
        """Means and ratios with their MCSE, violation counts, slope fits and the verdict per (setting, eps)."""
        k = raw["k"].values.astype(float)
        n_set, n_eps = raw.sizes["setting"], raw.sizes["eps"]
        blocks = {n: raw[f"raw_{n}"].values for n in (*BLOCK_VARS, *BLOCK_VARS_E)}
        out = {}
        for name in (*_MEANS, *BLOCK_VARS_E):
            out[name], out[f"{name}_mcse"] = mean_mcse(blocks[name], axis=1)
        for t in ("score", "avg", "max"):
            out[f"violations_{t}"] = np.nansum(blocks[f"viol_{t}"], axis=1)
            tight = blocks[f"tight_{t}"]
            out[f"tightness_{t}"] = (np.nanmax(tight, axis=1) if np.isfinite(tight).any()
                                     else np.full(tight.shape[:1] + tight.shape[2:], np.nan))
        for name, (num, den, _) in RATIOS.items():
            pairs = [[_ratio(blocks[num][s, :, e], blocks[den][s, :, e]) for e in range(n_eps)] for s in range(n_set)]
            out[name] = np.array([[p[0] for p in row] for row in pairs])
            out[f"{name}_mcse"] = np.array([[p[1] for p in row] for row in pairs])
        for name, (var, _) in SLOPES.items():
            fits = np.array([[_slope(k, blocks[var][s, :, e], cfg["k_fit_min"], name in _ONE_SIDED)
                              for e in range(n_eps)] for s in range(n_set)])
            for i, suffix in enumerate(("", "_se", "_p", "_detect50", "_detect80")):
                out[f"slope_{name}{suffix}"] = fits[..., i]
        cells = [[_cell_verdict({t: int(out[f"violations_{t}"][s, e].sum()) for t in ("avg", "max", "score")},
                                _slope_problems(out["slope_avg_p"][s, e], out["slope_max_p"][s, e],
                                                out["slope_avg"][s, e], out["slope_max"][s, e]),
                                str(raw["cell_error"].values[s]))
                  for e in range(n_eps)] for s in range(n_set)]
        out["verdict"] = np.array([[c[0] for c in row] for row in cells])
        out["verdict_reason"] = np.array([[c[1] for c in row] for row in cells])
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "tolerance": f"|dl| > B + {TOL_ABS:g} + {TOL_REL:g} |l_k| counts as a violation",
                "tuples_per_k": int(cfg["n_blocks"] * cfg["block_anchors"])}

    def report_sections(self, doc, ds):
        from simkit.report.continuity import continuity_sections
        continuity_sections(doc, ds)

    def summary_text(self, ds) -> str:
        k = int(ds["k"].values[-1])
        lines = [f"{'setting':<14}{'eps':>6}{'viol':>6}{'B_avg slope':>22}{'p':>9}{'B_max slope':>20}{'p':>9}"
                 f"{'B_max/B_avg @' + str(k):>20}  verdict"]
        for i, s in enumerate(ds["setting"].values):
            for j, e in enumerate(ds["eps"].values):
                nv = int(sum(ds[f"violations_{t}"].values[i, j].sum() for t in ("avg", "max", "score")))
                lines.append(
                    f"{s:<14}{e:>6g}{nv:>6d}{ds['slope_avg'].values[i, j]:>+12.2e} ± "
                    f"{ds['slope_avg_se'].values[i, j]:<7.1e}"
                    f"{ds['slope_avg_p'].values[i, j]:>9.2g}{ds['slope_max'].values[i, j]:>+11.4f} ± "
                    f"{ds['slope_max_se'].values[i, j]:<6.4f}{ds['slope_max_p'].values[i, j]:>9.1e}"
                    f"{ds['ratio_max_avg'].values[i, j, -1]:>12.4f} ± {ds['ratio_max_avg_mcse'].values[i, j, -1]:<6.4f}"
                    f"  {ds['verdict'].values[i, j]}")
        return "\n".join(lines)


STUDY = Continuity()

if __name__ == "__main__":
    from simkit.cli import main
    sys.exit(main(["run", "continuity", *sys.argv[1:]]))
