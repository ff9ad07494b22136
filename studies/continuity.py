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
           d = 16 with the vMF mixture pi of studies/rate_k.py.
Estimand   Per tuple and k: |l_k(psi) - l_k(phi)|, the averaging bound B_avg and the max bound
           B_max (below); their means over tuples and pairs as functions of k; the ratios
           E B_max / E B_avg, E B_avg / E|dl|, E B_max / E|dl|.
Methods    Exact evaluation per tuple (running log-sum-exp over the negatives, so every k of the
           grid comes from one pass); validity counted on every tuple; slope of log E[B] on log k
           over k >= k_fit_min (WLS, statsmodels, with delete-one-block jackknife SE: simkit.analysis
           .fit_rate); ratios of means with jackknife MCSE.
Performance  Violations (must be 0 for both bounds); slope of the averaging bound with a two-sided
           t test of slope = 0 at level ALPHA and its detectable slope (power); slope of the max
           bound with a one-sided t test of slope <= 0 at level ALPHA; every mean and ratio with
           its MCSE.

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
from simkit.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.engine import Param, Study
from simkit.infonce import k_grid
from studies.rate_k import MIXTURE_SEED, MIXTURE_WEIGHTS, build_pi

__all__ = ["loss_difference_bounds", "violations", "perturb", "SETTINGS", "STUDY", "ALPHA"]

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


def perturb(phi, eps: float, *, rng=None):
    """psi = phi with parameters ``theta + eps ||theta|| e``, e uniform on the unit sphere of R^{n_params}."""
    if not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"'eps' must be a finite number >= 0, got {eps!r}")
    rng = np.random.default_rng(rng)
    e = rng.standard_normal(phi.n_params)
    e /= np.linalg.norm(e)
    return phi.with_params(phi.params + eps * np.linalg.norm(phi.params) * e)


# ----------------------------------------------------------------------------------------------
# the study

def _attrs(long_name: str, units: str, description: str) -> dict:
    return {"long_name": long_name, "units": units, "description": description}


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


class Continuity(Study):
    name = "continuity"
    claim = "C4"
    title = "Claim C4: softmax averages, not maxima, bound InfoNCE loss differences"
    cell_dim = "setting"
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

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        ds = raw.copy()
        k = raw["k"].values.astype(float)
        eps = raw["eps"].values
        S, E, G = raw.sizes["setting"], eps.size, k.size
        B = raw.sizes["block"]
        n_tuples = B * cfg["block_anchors"]
        a = _attrs
        SEK, SE = ("setting", "eps", "k"), ("setting", "eps")
        new = {}
        for name in ("dl", "bound_score", "bound_avg", "bound_max", "neg_avg", "neg_max"):
            m, se = mean_mcse(raw[f"raw_{name}"].values, axis=1)
            desc = BLOCK_VARS[name].replace("mean over the block's tuples of ", "").replace("mean of ", "")
            new[name] = (SEK, m, a(f"mean {desc}", "nat" if name.startswith(("dl", "bound")) else "1",
                                   f"mean over tuples and blocks; {BLOCK_VARS[name]}"))
            new[f"{name}_mcse"] = (SEK, se, a(f"MCSE of {name}", "nat" if name.startswith(("dl", "bound")) else "1",
                                              "sd over blocks / sqrt(n_blocks)"))
        for name in ("anchor_term", "neg_plain", "param_dist"):
            m, se = mean_mcse(raw[f"raw_{name}"].values, axis=1)
            new[name] = (SE, m, a(name.replace("_", " "), "1", BLOCK_VARS_E[name]))
            new[f"{name}_mcse"] = (SE, se, a(f"MCSE of {name}", "1", "sd over blocks / sqrt(n_blocks)"))
        for tag in ("score", "avg", "max"):
            v = raw[f"raw_viol_{tag}"].values
            new[f"violations_{tag}"] = (SEK, np.nansum(v, axis=1), a(
                f"tuples violating B_{tag}", "1", f"count over all blocks ({n_tuples} tuples per k and eps)"))
            t = raw[f"raw_tight_{tag}"].values
            tmax = np.nanmax(t, axis=1) if np.isfinite(t).any() else np.full((S, E, G), np.nan)
            new[f"tightness_{tag}"] = (SEK, tmax, a(f"largest |dl| / B_{tag} over tuples", "1",
                                                    "at most 1 when the bound holds; near 1: tight on some tuple"))
        # ratios of means with jackknife MCSE
        ratios = {"ratio_max_avg": ("bound_max", "bound_avg", "E B_max / E B_avg"),
                  "ratio_avg_dl": ("bound_avg", "dl", "E B_avg / E |dl|"),
                  "ratio_max_dl": ("bound_max", "dl", "E B_max / E |dl|"),
                  "ratio_score_dl": ("bound_score", "dl", "E B_score / E |dl|"),
                  "ratio_negmax_negavg": ("neg_max", "neg_avg", "E max_j |dw_j| / E softmax-average |dw|")}
        for name, (num, den, ln) in ratios.items():
            est, se = np.full((S, E, G), np.nan), np.full((S, E, G), np.nan)
            for s in range(S):
                for e in range(E):
                    blocks = np.stack([raw[f"raw_{num}"].values[s, :, e], raw[f"raw_{den}"].values[s, :, e]], axis=1)
                    blocks = blocks[np.all(np.isfinite(blocks), axis=(1, 2))]
                    if blocks.shape[0] >= 3:
                        f, j, _ = jackknife(lambda m: m[0] / m[1], blocks)
                        est[s, e], se[s, e] = f, j
            new[name] = (SEK, est, a(ln, "1", "ratio of means over tuples and blocks"))
            new[f"{name}_mcse"] = (SEK, se, a(f"MCSE of {name}", "1", "delete-one-block jackknife"))
        # slopes of log mean bound on log k over k >= k_fit_min
        kmin = cfg["k_fit_min"]
        fields = {}
        for name in ("avg", "max", "negavg", "negmax", "score", "dl"):
            for suffix in ("", "_se", "_p", "_detect50", "_detect80"):
                fields[f"slope_{name}{suffix}"] = np.full((S, E), np.nan)
        src = {"avg": "bound_avg", "max": "bound_max", "negavg": "neg_avg", "negmax": "neg_max",
               "score": "bound_score", "dl": "dl"}
        df = np.full(S, np.nan)
        for s in range(S):
            for e in range(E):
                for name, var in src.items():
                    blocks = raw[f"raw_{var}"].values[s, :, e]
                    fit = fit_rate(k, blocks, kmin, with_inverse=False)
                    b, se = fit.slope, fit.slope_se
                    df[s] = fit.df
                    fields[f"slope_{name}"][s, e], fields[f"slope_{name}_se"][s, e] = b, se
                    if not (np.isfinite(b) and se > 0):
                        continue
                    if name == "max" or name == "negmax":  # one-sided: H0 slope <= 0
                        p = stats.t.sf(b / se, fit.df)
                        q = stats.t.isf(ALPHA, fit.df)
                    else:  # two-sided: H0 slope = 0
                        p = 2 * stats.t.sf(abs(b / se), fit.df)
                        q = stats.t.isf(ALPHA / 2, fit.df)
                    fields[f"slope_{name}_p"][s, e] = p
                    fields[f"slope_{name}_detect50"][s, e] = q * se
                    fields[f"slope_{name}_detect80"][s, e] = (q + stats.norm.isf(0.2)) * se
        what = {"avg": "mean B_avg", "max": "mean B_max", "negavg": "mean softmax average of |dw|",
                "negmax": "mean max_j |dw_j|", "score": "mean B_score", "dl": "mean |dl|"}
        for name, text in what.items():
            sided = "one-sided, H0: slope <= 0" if name in ("max", "negmax") else "two-sided, H0: slope = 0"
            new[f"slope_{name}"] = (SE, fields[f"slope_{name}"], a(
                f"slope of log {text} on log k", "1", f"WLS over k >= {kmin}, delete-one-block jackknife"))
            new[f"slope_{name}_se"] = (SE, fields[f"slope_{name}_se"], a(
                f"jackknife SE of slope_{name}", "1", "delete-one-block jackknife"))
            new[f"slope_{name}_p"] = (SE, fields[f"slope_{name}_p"], a(
                f"p-value for slope_{name}", "1", f"Student t with n_blocks - 1 df, {sided}"))
            new[f"slope_{name}_detect50"] = (SE, fields[f"slope_{name}_detect50"], a(
                f"slope detected with probability 1/2 ({text})", "1", f"critical t at level {ALPHA:g} times the SE"))
            new[f"slope_{name}_detect80"] = (SE, fields[f"slope_{name}_detect80"], a(
                f"slope detected with probability 0.8 ({text})", "1", "(critical t + z_0.8) times the SE"))
        # verdicts per (setting, eps)
        verdict = np.full((S, E), "fail", dtype=object)
        reason = np.full((S, E), "", dtype=object)
        for s in range(S):
            err = str(raw["cell_error"].values[s])
            for e in range(E):
                problems = []
                for tag in ("avg", "max", "score"):
                    nv = int(new[f"violations_{tag}"][1][s, e].sum())
                    if nv:
                        problems.append(f"B_{tag} violated on {nv} (tuple, k) pairs")
                pa, pm = fields["slope_avg_p"][s, e], fields["slope_max_p"][s, e]
                if not np.isfinite(pa) or not np.isfinite(pm):
                    problems.append("slope fit failed (too few blocks or non-positive means)")
                else:
                    if pa < ALPHA:
                        problems.append(f"B_avg slope {fields['slope_avg'][s, e]:.2e} != 0 (p = {pa:.2g})")
                    if not pm < ALPHA:
                        problems.append(f"B_max growth not detected (slope {fields['slope_max'][s, e]:.2e}, "
                                        f"p = {pm:.2g})")
                verdict[s, e] = "pass" if not problems else "fail"
                if err:
                    verdict[s, e] = "error"
                    problems.insert(0, "a task failed (see cell_error)")
                reason[s, e] = "; ".join(problems)
        new["verdict"] = (SE, verdict.astype(str), a(
            "verdict for C4", "1", f"pass when no tuple violates any bound, the two-sided test of zero slope for "
            f"B_avg is not rejected at {ALPHA:g} and the one-sided test of positive slope for B_max rejects at "
            f"{ALPHA:g}; error when a task failed"))
        new["verdict_reason"] = (SE, reason.astype(str), a("why a cell failed", "1", "empty when it passed"))
        for name, (dims, values, at) in new.items():
            ds[name] = (dims, values)
            ds[name].attrs = at
        ds["k"].attrs = a("number of negatives k", "1",
                          "geometric grid 1, 2, 4, ..., k_max; the first k of K negatives")
        ds["eps"].attrs = a("relative parameter perturbation eps", "1", "theta_psi = theta_phi + eps ||theta_phi|| e")
        ds["setting"].attrs = a("design setting", "1", "name in studies/continuity.py SETTINGS")
        for c, (ln, desc) in {"family": ("embedding family",
                                         "linear: Wx/|Wx|; two_layer: normalize(W2 tanh(W1 x + b1))"),
                              "p": ("input dimension p", "points on S^{p-1}"),
                              "d": ("embedding dimension d", "S^{d-1}"),
                              "hidden": ("hidden width m", "0 for the linear family"),
                              "pi": ("data distribution family", f"uniform or mixture (rate_k's: weights "
                                     f"{MIXTURE_WEIGHTS}, means from seed {MIXTURE_SEED})"),
                              "kappa_pi": ("concentration of pi", "vMF concentration of each mixture component"),
                              "kappa_m": ("kernel concentration kappa_M", "x+ ~ vMF(x, kappa_M)"),
                              "tau": ("temperature tau", "s(x, y) = phi(x).phi(y)/tau")}.items():
            ds[c].attrs = a(ln, "1", desc)
        for v in [n for n in ds.data_vars if n.startswith("raw_")]:
            base = v[4:]
            ds[v].attrs = a(f"per-block {base}", "nat" if base.startswith(("dl", "bound")) else "1",
                            BLOCK_VARS.get(base, BLOCK_VARS_E.get(base, "")))
        ds.attrs["alpha"] = ALPHA
        ds.attrs["tolerance"] = f"|dl| > B + {TOL_ABS:g} + {TOL_REL:g} |l_k| counts as a violation"
        ds.attrs["tuples_per_k"] = int(n_tuples)
        return ds

    def report(self, ds, path):
        from simkit.report_continuity import continuity_report
        continuity_report(ds, path)

    def report_sections(self, doc, ds):
        from simkit.report_continuity import continuity_sections
        continuity_sections(doc, ds)

    def claim_rows(self, ds) -> list[dict]:
        """One C4 check over every (setting, eps): no violation, B_avg flat, B_max growing.

        The estimate is the B_avg slope farthest from 0 in standard errors.
        """
        b, se = ds["slope_avg"].values, ds["slope_avg_se"].values
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(np.isfinite(b), np.abs(b) / se, np.inf)
        worst = np.unravel_index(int(np.argmax(z)), z.shape)
        verdicts = ds["verdict"].values
        flat = [str(v) for v in verdicts.ravel()]
        overall = combine_verdicts(flat)
        n = len(flat)
        nviol = int(sum(int(ds[f"violations_{t}"].values.sum()) for t in ("avg", "max", "score")))
        parts = []
        for i, s in enumerate(ds["setting"].values):
            for j, e in enumerate(ds["eps"].values):
                reason = str(ds["verdict_reason"].values[i, j])
                parts.append(f"{s} eps {e:g}: B_avg slope {b[i, j]:.2e} ± {se[i, j]:.1e}, B_max slope "
                             f"{ds['slope_max'].values[i, j]:.3f} ± {ds['slope_max_se'].values[i, j]:.3f}, "
                             f"B_max/B_avg at k = {int(ds['k'].values[-1])}: "
                             f"{ds['ratio_max_avg'].values[i, j, -1]:.3f} -> {verdicts[i, j]}"
                             + (f" ({reason})" if reason else ""))
        detail = f"{nviol} bound violations over {int(ds.attrs.get('tuples_per_k', 0))} tuples x {ds.sizes['k']} k x " \
                 f"{ds.sizes['eps']} eps x {ds.sizes['setting']} settings; " + "; ".join(parts)
        return [{
            "claim": "C4",
            "statistic": f"per (setting, eps), {n} cells: no tuple violates B_avg or B_max; slope of log E B_avg on "
                         f"log k = 0 not rejected (two-sided, {ALPHA:g}); slope of log E B_max > 0 detected "
                         f"(one-sided, {ALPHA:g})",
            "estimate": float(b[worst]),
            "estimate_mcse": float(se[worst]),
            "false_fail_rate": float(1.0 - (1.0 - ALPHA) ** n),
            "verdict": overall,
            "detail": detail,
        }]

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
