"""Claim C3 (complexity term of Theorem 1): the empirical Rademacher complexity of the InfoNCE loss class
stabilises as k grows; a loss summed over the negatives does not.

For linear embeddings phi_W(x) = Wx/|Wx| with W in a compact box around I (so the class is Lipschitz in
theta, as Theorem 1 requires), the empirical Rademacher complexity hat R_n is estimated as a function of
k and of n, its supremum by L-BFGS-B with restarts (a LOWER bound: the optimiser may miss the global
maximum) in a centred form that removes the noise of the loss level. Tests: a one-sided t test of a
positive slope of log hat R_n on log k (must not reject), the same test on the negative control, the
pairwise logistic loss *summed* over the negatives (must reject), and the n-slope against -1/2. The
max-type surrogate max_j s_j is no control: on S^2 it tends to 1/tau for every theta as k grows, so its
complexity falls with k. The ADEMP statement is the class attribute ``Rademacher.ademp`` (stored in the
dataset); in full: docs/design.md, "studies/rademacher".

Run it: ``simkit run rademacher`` (or ``python -m simkit run rademacher``).
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import xarray as xr
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

from simkit import Uniform, VMFKernel
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.training import EmpiricalRisk, TrainingSample
from simkit.estimators.infonce import k_grid
from simkit.estimators.rademacher import OPTIMISER, PairwiseSumRisk, box_bounds, rademacher_sup
from simkit.runner import (Check, Param, Study, Var, cell_errors, check_result, dataset_config, estimate_vars,
                           verdict)
from simkit.stats.analysis import mean_mcse
from simkit.stats.exponents import exponent_test
from simkit.stats.trend import DETECT_POWER

__all__ = ["LOSSES", "ALPHA", "SCHEMA", "C3_CHECK", "STUDY"]

#: level of every test of this study
ALPHA = 1e-3
#: a restart "improves" the best value when it raises it by more than this (nats)
IMPROVE_TOL = 1e-7
#: the loss classes: name -> role
LOSSES = {"infonce": "claim C3: InfoNCE l_k (log-sum-exp average over the negatives)",
          "pairsum": "negative control: sum over the negatives of log(1 + e^{s_j - s_0})"}


# ----------------------------------------------------------------------------------------------
# the dataset

LK, LKR, LO = ("loss", "k"), ("loss", "k", "restart"), ("loss",)
NATS = "nats (dimensionless, udunits '1')"
SE = "sd over blocks / sqrt(n_blocks)"
JK = "delete-one-block jackknife"


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


def _with_mcse(name, dims, long_name, description):
    """``name`` and ``name_mcse`` (a block mean in nats and its MCSE)."""
    return estimate_vars(name, dims, long_name, description, nats=True)


#: every variable and coordinate of the dataset
SCHEMA = {
    "raw_excess": _v(("loss", "block", "draw", "k", "restart"), "per-block excess, in nats",
                     "per draw, k and r: best-of-r centred supremum; " + NATS),
    "raw_ref": _v(("loss", "block", "draw", "k"), "per-block ref, in nats",
                  "(1/n) sum_i sigma_i l_i(theta_0): the uncentred supremum is excess + ref; " + NATS),
    "raw_excess_n": _v(("loss", "block", "draw", "n", "kn", "restart"), "per-block excess_n, in nats",
                       "as excess, for the n-curve; " + NATS),
    "raw_ref_n": _v(("loss", "block", "draw", "n", "kn"), "per-block ref_n, in nats", "as ref, for the n-curve; " + NATS),
    "raw_nfev": _v(("loss", "block", "k"), "per-block nfev", "objective evaluations of the block"),
    "raw_not_converged": _v(("loss", "block", "k"), "per-block not_converged", "runs without convergence"),
    **_with_mcse("complexity_by_restart", LKR, "hat R_n, best of the first r starts",
                 "mean over samples and sigma draws of the centred supremum found by the best of the first r L-BFGS-B "
                 "starts (a lower bound on the supremum)"),
    **_with_mcse("complexity", LK, "empirical Rademacher complexity hat R_n (lower bound)",
                 "E_sigma sup_theta (1/n) sum_i sigma_i [l_i(theta) - l_i(theta_0)] with the sup by the best of all "
                 "starts; a lower bound on the supremum (optimisation may miss the global maximum)"),
    **_with_mcse("complexity_uncentred", LK, "hat R_n without centring",
                 "E_sigma sup_theta (1/n) sum_i sigma_i l_i(theta): same expectation, plus the mean-zero term "
                 "(1/n) sum_i sigma_i l_i(theta_0)"),
    **_with_mcse("restart_gain_last", LK, "gain of the last start",
                 "best of all starts minus best of all but the last (paired over draws)"),
    **_with_mcse("restart_gain_total", LK, "gain of starts 2..R over the first",
                 "best of all starts minus the run from theta_0 alone"),
    **_with_mcse("restart_shortfall", LKR, "shortfall of the best of the first r starts",
                 "best of all starts minus best of the first r (paired over draws); 0 at r = restarts"),
    "share_improved": _v(LKR, "share of suprema raised by start r",
                         f"fraction of (sample, sigma) pairs where start r raised the best of the first r - 1 by more "
                         f"than {IMPROVE_TOL:g} nats (NaN for r = 1)"),
    "share_improved_last": _v(LK, "share of suprema raised by the last start", "share_improved at r = restarts"),
    "nfev_per_run": _v(LK, "objective evaluations per L-BFGS-B run", "mean over runs"),
    "not_converged": _v(LK, "L-BFGS-B runs without convergence",
                        f"runs stopped by maxiter = {OPTIMISER['maxiter']} or a line-search failure (their value still "
                        "enters, as a lower bound)"),
    "slope": _v(LO, "exponent b of hat R_n ~ k^b", "WLS slope of log hat R_n on log k over k >= k_fit_min, jackknife SE"),
    "slope_se": _v(LO, "jackknife SE of slope", JK),
    "slope_df": _v(LO, "degrees of freedom of the slope tests", "finished blocks - 1 (Student t of slope_p, "
                   "slope_upper and slope_mde)"),
    "slope_upper": _v(LO, f"one-sided upper {1 - ALPHA:g} confidence bound of slope", "slope + t_(1-alpha, df) SE"),
    "slope_p": _v(LO, "p-value of H0: slope <= 0", "one-sided Student t, slope_df df; small = growth in k"),
    "slope_mde": _v(LO, f"smallest growth exponent detected with probability {DETECT_POWER:g}",
                    f"(t_(1-{ALPHA:g}) + t_{DETECT_POWER:g}) x SE on slope_df df (simkit.stats.trend.detectable_t)"),
    "slope_by_restart": _v(("loss", "restart"), "k-slope using the best of the first r starts", "as slope, with "
                           "fewer starts"),
    "slope_by_restart_se": _v(("loss", "restart"), "jackknife SE of slope_by_restart", JK),
    **_with_mcse("complexity_n", ("loss", "n", "kn"), "hat R_n against n (lower bound)",
                 "as complexity, for the n-curve (InfoNCE only; NaN otherwise)"),
    "n_slope": _v(("loss", "kn"), "exponent of hat R_n ~ n^b", "WLS slope of log hat R_n on log n over n_grid, "
                  "jackknife SE"),
    "n_slope_se": _v(("loss", "kn"), "jackknife SE of n_slope", JK),
    "n_slope_p": _v(("loss", "kn"), "p-value of H0: n_slope <= -1/2", "one-sided Student t; small = decay slower than "
                    "n^-1/2"),
    "verdict": _v((), "verdict for C3 (complexity term)",
                  f"pass when the one-sided test of k-slope <= 0 does not reject for InfoNCE at {ALPHA:g}, rejects for "
                  f"the negative control, and no n-slope is significantly above -1/2 at {ALPHA:g}; error when a task "
                  "failed"),
    "verdict_reason": _v((), "why the study failed", "empty when it passed"),
    "loss": _v(LO, "loss class", "; ".join(f"{k_}: {v}" for k_, v in LOSSES.items())),
    "k": _v(("k",), "number of negatives k", "the first k of each tuple's k_max negatives"),
    "restart": _v(("restart",), "number of optimiser starts r", "best of starts 1..r; start 1 is theta_0 = I"),
    "draw": _v(("draw",), "Rademacher draw", "sign vector sigma (per sample)"),
    "n": _v(("n",), "number of tuples n", "the first n tuples of the sample (n-curve)"),
    "kn": _v(("kn",), "number of negatives k of the n-curve", "parameter k_for_n"),
    "tau": _v(LO, "temperature tau", "s(x, y) = phi(x).phi(y)/tau"),
    "kappa_m": _v(LO, "kernel concentration kappa_M", "x+ ~ vMF(x, kappa_M)"),
    "radius": _v(LO, "parameter box half-width", "W = I + A, |A_ij| <= radius"),
}


# ----------------------------------------------------------------------------------------------
# the analysis

def _nanmean(a: NDArray, axis: int) -> NDArray:
    """Mean ignoring NaN; all-NaN slices (the control's absent n-curve, failed blocks) give NaN silently."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(a, axis=axis)


def _mean_mcse(out: dict, name: str, blocks: NDArray) -> None:
    """``out[name], out[name_mcse]``: mean over the block axis (1) and its MCSE."""
    with np.errstate(invalid="ignore"):
        out[name], out[f"{name}_mcse"] = mean_mcse(blocks, axis=1)


def _k_slopes(k: NDArray, blk: NDArray, kmin: int) -> dict:
    """The k-exponent of every loss (best of all starts, with its one-sided test) and per number of starts."""
    L, R = blk.shape[0], blk.shape[-1]
    fields = {"slope": "slope", "slope_se": "se", "slope_df": "df", "slope_upper": "upper", "slope_p": "p",
              "slope_mde": "mde"}
    out = {n: np.full(L, np.nan) for n in fields}
    out["slope_by_restart"], out["slope_by_restart_se"] = np.full((L, R), np.nan), np.full((L, R), np.nan)
    for i in range(L):
        t = exponent_test(k, blk[i, ..., -1], kmin, alpha=ALPHA)
        for name, f in fields.items():
            out[name][i] = getattr(t, f)
        for r in range(R):
            tr = exponent_test(k, blk[i, :, :, r], kmin, alpha=ALPHA)
            out["slope_by_restart"][i, r], out["slope_by_restart_se"][i, r] = tr.slope, tr.se
    return out


def _n_slopes(ns: NDArray, exn: NDArray) -> dict:
    """The n-exponent of every loss with an n-curve at every k of k_for_n, and the p-value of H0: <= -1/2."""
    L, KN = exn.shape[0], exn.shape[-1]
    out = {n: np.full((L, KN), np.nan) for n in ("n_slope", "n_slope_se", "n_slope_p")}
    for i, j in itertools.product(range(L), range(KN)):
        if np.isfinite(exn[i, :, :, j]).any():
            t = exponent_test(ns, exn[i, :, :, j], int(ns[0]), alpha=ALPHA, bound=-0.5)
            out["n_slope"][i, j], out["n_slope_se"][i, j], out["n_slope_p"][i, j] = t.slope, t.se, t.p
    return out


def _verdict(losses: list[str], out: dict, kn: NDArray, errors: list[str]) -> tuple[str, str]:
    """C3: InfoNCE not flagged, every n-slope not slower than -1/2, the control flagged."""
    problems = []
    for i, name in enumerate(losses):
        p, b = out["slope_p"][i], out["slope"][i]
        if not np.isfinite(p):
            problems.append(f"{name}: k-slope fit failed")
        elif name == "infonce" and p < ALPHA:
            problems.append(f"infonce: growth in k detected (slope {b:.4f}, p = {p:.2g})")
        elif name == "pairsum" and not p < ALPHA:
            problems.append(f"negative control not flagged (slope {b:.4f}, p = {p:.2g}): the test lacks power")
        if name == "infonce":
            for j, kk in enumerate(kn):
                pj = out["n_slope_p"][i, j]
                if not np.isfinite(pj):
                    problems.append(f"infonce: n-slope fit at k = {int(kk)} failed")
                elif pj < ALPHA:
                    problems.append(f"infonce: decay in n slower than n^-1/2 at k = {int(kk)} "
                                    f"(slope {out['n_slope'][i, j]:.3f}, p = {pj:.2g})")
    if "infonce" not in losses:
        problems.append("the InfoNCE loss class was not run")
    return verdict(problems, errors)


def _c3_check(ds: xr.Dataset) -> dict:
    """The InfoNCE k-exponent (one-sided test), the control flagged, the n-exponents."""
    losses = [str(v) for v in ds["loss"].values]
    i = losses.index("infonce") if "infonce" in losses else 0
    parts = [f"{name}: k-exponent {ds['slope'].values[j]:.4f} ± {ds['slope_se'].values[j]:.4f} "
             f"(p of H0 <= 0: {ds['slope_p'].values[j]:.2g}), hat R_n at k = {int(ds['k'].values[-1])}: "
             f"{ds['complexity'].values[j, -1]:.4f} ± {ds['complexity_mcse'].values[j, -1]:.4f}"
             for j, name in enumerate(losses)]
    parts += [f"n-exponent at k = {int(kk)}: {ds['n_slope'].values[i, j]:.3f} ± {ds['n_slope_se'].values[i, j]:.3f}"
              for j, kk in enumerate(ds["kn"].values)]
    return check_result(ds["slope"].values[i], ds["slope_se"].values[i], str(ds["verdict"].values), "; ".join(parts),
                        str(ds["verdict_reason"].values))


C3_CHECK = Check(
    claim="C3",
    statistic=lambda ds: (f"exponent b of hat R_n ~ k^b (InfoNCE, k >= {int(dataset_config(ds).get('k_fit_min', 16))}), "
                          f"one-sided test of b <= 0 at {ALPHA:g}; negative control (sum over negatives) must be "
                          f"flagged; n-exponent not above -1/2 (one-sided, {ALPHA:g}); hat R_n is a lower bound"),
    evaluate=_c3_check,
    false_fail_rate=lambda ds: 1.0 - (1.0 - ALPHA) ** (1 + ds.sizes["kn"]),
)


class Rademacher(Study):
    name = "rademacher"
    claim = "C3"
    title = "Claim C3: the Rademacher complexity of the InfoNCE loss class stabilises in k"
    cell_dim = "loss"
    ademp = {
        "aim": "C3 (Theorem 1, complexity term): the empirical Rademacher complexity of the InfoNCE loss class is "
               "O(n^-1/2) and stabilises (does not grow) as k grows",
        "data": "uniform pi on S^2, vMF positives, K i.i.d. negatives per tuple (first k used: common random numbers); "
                "class: phi_W = Wx/|Wx|, W = I + A with |A_ij| <= radius; negative control: pairwise logistic loss "
                "summed over the negatives",
        "estimand": "hat R_n = E_sigma sup_theta (1/n) sum_i sigma_i l(theta; z_i), averaged over samples, against k "
                    "and n",
        "methods": "sup by box-constrained L-BFGS-B with restarts (a LOWER bound on the sup); centred at theta_0 = I "
                   "(same expectation, less noise); WLS log-log slopes with delete-one-block jackknife SE",
        "performance": "hat R_n and best-of-r with MCSE; one-sided t test of k-slope <= 0 (claim) and the same test on "
                       "the control (must reject); detectable slope; n-slope against -1/2 (one-sided)",
    }
    schema = SCHEMA
    checks = (C3_CHECK,)
    params = {
        "losses": Param("losses", str, "infonce,pairsum", "loss classes (infonce; pairsum = negative control)",
                        choices=tuple(LOSSES), multi=True),
        "tau": Param("tau", float, 0.5, "temperature", low=0.05, high=100.0),
        "kappa_m": Param("kappa_m", float, 10.0, "concentration of the positive kernel vMF(x, kappa_M)",
                         low=0.0, high=1e4),
        "radius": Param("radius", float, 0.3, "half-width of the parameter box |A_ij| <= radius (W = I + A)",
                        low=0.0, low_open=True, high=0.33),
        "n_main": Param("n_main", int, 32, "tuples n of the k-curve", low=4, high=4096),
        "k_max": Param("k_max", int, 1024, "largest k (power of two); k-curve on 1, 2, 4, ..., k_max",
                       low=16, high=1 << 14, power_of_two=True, quick=256),
        "k_fit_min": Param("k_fit_min", int, 16, "smallest k of the k-slope fit (power of two)", low=1,
                           high=1 << 14, power_of_two=True),
        "n_grid": Param("n_grid", int, "16,32,64,128", "comma-separated n of the n-curve (InfoNCE only)",
                        quick="16,32,64", multi=True, min_items=3, low=4, items_doc="integers >= 4"),
        "k_for_n": Param("k_for_n", int, "4,128", "comma-separated k (powers of two <= k_max) of the n-curve",
                         quick="4,64", multi=True, low=1, power_of_two=True, items_doc="powers of two"),
        "restarts": Param("restarts", int, 4, "optimiser starts per supremum (theta_0, then uniform in the box)",
                          low=2, high=64, quick=3),
        "draws": Param("draws", int, 1, "Rademacher sign vectors sigma per sample (block)", low=1, high=1000),
        "n_blocks": Param("n_blocks", int, 24, "independent samples (replicate blocks)", low=4, high=100000,
                          quick=12),
    }

    def check_config(self, cfg):
        if cfg["k_fit_min"] * 8 > cfg["k_max"]:
            raise ValueError(f"'k_fit_min' must be <= k_max / 8 = {cfg['k_max'] // 8} (at least 4 grid points in "
                             f"the fit), got {cfg['k_fit_min']}")
        if self._grid("k_for_n", cfg)[-1] > cfg["k_max"]:
            raise ValueError(f"'k_for_n' must be <= k_max = {cfg['k_max']}, got {cfg['k_for_n']!r}")

    def _grid(self, name: str, cfg: dict) -> list[int]:
        return self.params[name].values(cfg[name])

    def cells(self, cfg):
        return [{"loss": name, "tau": float(cfg["tau"]), "kappa_m": float(cfg["kappa_m"]),
                 "radius": float(cfg["radius"])} for name in cfg["losses"].split(",")]

    def block_dims(self, cfg):
        coords = {"draw": np.arange(cfg["draws"]), "k": k_grid(cfg["k_max"]),
                  "restart": np.arange(1, cfg["restarts"] + 1), "n": np.array(self._grid("n_grid", cfg)),
                  "kn": np.array(self._grid("k_for_n", cfg))}
        dims = {"excess": ("draw", "k", "restart"), "ref": ("draw", "k"),
                "excess_n": ("draw", "n", "kn", "restart"), "ref_n": ("draw", "n", "kn"),
                "nfev": ("k",), "not_converged": ("k",)}
        return dims, coords

    def generate(self, cell, cfg, prep, rng):
        """One sample (n_max tuples, k_max negatives each) and ``draws`` sign vectors with their starts.

        Draw order: anchors, positives, negatives; then per draw the signs and the random starts.
        """
        ks = k_grid(cfg["k_max"])
        ns, kn = self._grid("n_grid", cfg), self._grid("k_for_n", cfg)
        n_main, R, D = cfg["n_main"], cfg["restarts"], cfg["draws"]
        do_n = cell["loss"] == "infonce"
        n_max = max(ns + [n_main]) if do_n else n_main
        pi, kernel = Uniform(3), VMFKernel(cell["kappa_m"])
        x = pi.rvs(n_max, rng=rng)
        xp = kernel.sample(x, rng=rng)
        y = pi.rvs((n_max, cfg["k_max"]), rng=rng)
        theta0 = LinearEmbedding.identity(3)
        lo, hi = box_bounds(3, cell["radius"])
        Risk = EmpiricalRisk if cell["loss"] == "infonce" else PairwiseSumRisk
        out = {"excess": np.full((D, ks.size, R), np.nan), "ref": np.full((D, ks.size), np.nan),
               "excess_n": np.full((D, len(ns), len(kn), R), np.nan), "ref_n": np.full((D, len(ns), len(kn)), np.nan),
               "nfev": np.zeros(ks.size), "not_converged": np.zeros(ks.size)}
        with threadpool_limits(limits=1, user_api="blas"):
            for dr in range(D):
                sigma = rng.choice(np.array([-1.0, 1.0]), size=n_max)
                starts = [theta0.params] + [rng.uniform(lo, hi) for _ in range(R - 1)]
                cache = {}

                def solve(n, k):
                    if (n, k) not in cache:
                        sample = TrainingSample(x[:n], xp[:n], y[:n, :k])
                        cache[(n, k)] = rademacher_sup(Risk(sample, cell["tau"], weights=-sigma[:n]), theta0,
                                                       starts, lo, hi)
                    return cache[(n, k)]

                for j, k in enumerate(ks):
                    best, ref, nfev, bad = solve(n_main, int(k))
                    out["excess"][dr, j], out["ref"][dr, j] = best, ref
                    out["nfev"][j] += nfev
                    out["not_converged"][j] += bad
                if do_n:
                    for a, n in enumerate(ns):
                        for b, k in enumerate(kn):
                            best, ref, _, _ = solve(n, k)
                            out["excess_n"][dr, a, b], out["ref_n"][dr, a, b] = best, ref
        return out

    # ------------------------------------------------------------------------------------------
    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> dict:
        k = raw["k"].values.astype(float)
        R = raw.sizes["restart"]
        exc = raw["raw_excess"].values  # (loss, block, draw, k, restart)
        blk = _nanmean(exc, axis=2)  # per block: mean over its sigma draws
        out = {}
        _mean_mcse(out, "complexity_by_restart", blk)
        out["complexity"], out["complexity_mcse"] = out["complexity_by_restart"][..., -1], \
            out["complexity_by_restart_mcse"][..., -1]
        _mean_mcse(out, "complexity_uncentred", _nanmean(exc[..., -1] + raw["raw_ref"].values, axis=2))
        _mean_mcse(out, "restart_gain_last", _nanmean(exc[..., -1] - exc[..., -2], axis=2))
        _mean_mcse(out, "restart_gain_total", _nanmean(exc[..., -1] - exc[..., 0], axis=2))
        _mean_mcse(out, "restart_shortfall", _nanmean(exc[..., -1:] - exc, axis=2))  # best of all - best of r
        valid = np.isfinite(exc[..., -1])
        raised = np.concatenate([np.zeros_like(exc[..., :1]), exc[..., 1:] - exc[..., :-1] > IMPROVE_TOL], axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = raised.sum(axis=(1, 2)) / valid.sum(axis=(1, 2))[..., None]
        share[..., 0] = np.nan
        out["share_improved"], out["share_improved_last"] = share, share[..., -1]
        out["nfev_per_run"] = np.nansum(raw["raw_nfev"].values, axis=1) / np.maximum(valid.sum(axis=(1, 2)) * R, 1)
        out["not_converged"] = np.nansum(raw["raw_not_converged"].values, axis=1)
        out.update(_k_slopes(k, blk, cfg["k_fit_min"]))
        exn = _nanmean(raw["raw_excess_n"].values[..., -1], axis=2)  # (loss, block, n, kn): the n-curve
        _mean_mcse(out, "complexity_n", exn)
        out.update(_n_slopes(raw["n"].values.astype(float), exn))
        out["verdict"], out["verdict_reason"] = _verdict([str(v) for v in raw["loss"].values], out, raw["kn"].values,
                                                         cell_errors(raw))
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "optimiser": f"scipy L-BFGS-B in the box, {OPTIMISER}"}

    def summary_text(self, ds) -> str:
        lines = [f"{'loss':<9}{'hat R_n(k=1)':>20}{'hat R_n(k_max)':>20}{'k-exponent':>20}{'p(<=0)':>9}"
                 f"{'mde@90%':>11}{'last-start gain':>22}"]
        for j, name in enumerate(ds["loss"].values):
            c, s = ds["complexity"].values[j], ds["complexity_mcse"].values[j]
            lines.append(f"{name:<9}{c[0]:>11.4f} ± {s[0]:<6.4f}{c[-1]:>11.4f} ± {s[-1]:<6.4f}"
                         f"{ds['slope'].values[j]:>+11.4f} ± {ds['slope_se'].values[j]:<6.4f}"
                         f"{ds['slope_p'].values[j]:>9.2g}{ds['slope_mde'].values[j]:>11.4f}"
                         f"{np.nanmax(ds['restart_gain_last'].values[j]):>14.2e} (max)")
        for j, kk in enumerate(ds["kn"].values):
            i = list(ds["loss"].values).index("infonce") if "infonce" in ds["loss"].values else 0
            lines.append(f"n-exponent at k = {int(kk)}: {ds['n_slope'].values[i, j]:+.3f} ± "
                         f"{ds['n_slope_se'].values[i, j]:.3f} (p of H0 <= -1/2: {ds['n_slope_p'].values[i, j]:.2g})")
        lines.append(f"verdict: {ds['verdict'].values} {ds['verdict_reason'].values}")
        return "\n".join(lines)


STUDY = Rademacher()
