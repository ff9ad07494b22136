"""Claim C7: the 1/k rates of C1 and C2 hold for non-reversible, asymmetric positive kernels.

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        C7 (THEORY.md section 3): C1-C3 need no symmetry of M. Here C1 (gap_k = R_k - log k - CE
           = c1/k + O(1/k^2)) and C2 (D_k = R_k - E CE(M_k, Q_k) = O(1/k)) are re-tested for positive
           kernels that are not pi-reversible.
Data       phi = identity on S^{d-1}. Settings (kernel, pi):
           * rotated vMF kernel M(x, .) = vMF(R x, kappa_M), R a rotation by ``angle`` in the (e_1, e_2)
             plane, over uniform pi in d = 3 (pi-invariant, since R preserves the uniform law, but not
             reversible: R != R^T) and over a vMF pi in d = 8 (neither invariant nor reversible);
           * spherical Brownian motion run for time t (simkit.heat) over a vMF pi in d = 3 and d = 8:
             its transition density is symmetric, but pi is not its invariant law (pi M != pi), so
             pi(dx) M(x, dy) != pi(dy) M(y, dx);
           * optionally the reversible control: vMF kernel over uniform pi in d = 3 with tau = 1/kappa_M.
           Per replicate block: k_max negatives shared by the InfoNCE anchors (C1); an independent
           database of k_max points shared by the queries (C2); independent pairs for the
           non-reversibility diagnostics.
Estimand   gap_k and D_k on k = 1, 2, 4, ..., k_max; their log-log slopes; c1 (exact, or Monte Carlo
           over x for the rotated kernel) and d1 (predicted, diagnostic); non-reversibility
           statistics E[x_1 x+_2 - x_2 x+_1] and E[x+_1 - x_1] (both 0 for a reversible M).
Methods    The estimators of rate_k (simkit.infonce.GapEstimator) and search_ce
           (simkit.search.SearchEstimator; the Brownian density ratio m(x, y) = h_t(x.y) /
           (|S^{d-1}| pi(y)) is the heat-kernel series summed per pair to 1e-12 relative), with
           their control variates and pilot coefficients; the analysis and verdict rules of those
           studies (:func:`analyse_curve`): WLS of log|curve| on log k and 1/k over k >= k_min =
           smallest grid k >= 16 x the expansion scale, fitted only when the block means keep one
           sign there (search_ce's rule, applied to gap_k too: c1 < 0 is possible once M is
           asymmetric, and happens here); WLS of the curve on 1/k, 1/k^2 for the constant; jackknife
           over independent blocks for every standard error.
Performance  Per setting and claim: slope with 95% and 99.9% intervals; p-values of slope = -1/2 and
           -1; c1 against its exact value (z); d1 against its prediction (z, diagnostic); every
           estimate with its MCSE; non-reversibility statistics against their exact values.

Run it: ``simkit run asymmetry`` or ``python studies/asymmetry.py`` (same options).
"""

from __future__ import annotations

import math
import sys

import numpy as np
import xarray as xr
from scipy import stats

from simkit import RotatedVMFKernel, Uniform, VMFKernel, exact
from simkit._special import mean_resultant_length
from simkit.analysis import (choose_k_min, combine_verdicts, fit_inverse_powers, fit_rate, mean_mcse, worst_slope,
                             z_score)
from simkit.engine import Param, Study
from simkit.heat import BrownianKernel
from simkit.infonce import GapEstimator, k_grid
from simkit.search import N_TOP, SearchEstimator, search_constants
from studies import rate_k, search_ce

#: false-failure rate of each per-setting check (the level of rate_k and search_ce)
ALPHA = rate_k.ALPHA
assert ALPHA == search_ce.ALPHA

#: the design catalogue: name -> kernel family, its parameters, pi, dimension, tau and the queries
#: per C2 block (the Brownian density is a ~20-term series per pair, so its blocks are smaller)
SETTINGS = {
    "rot-uniform-d3": {"kernel": "rotated", "angle": 2.6, "kappa_m": 10.0, "t": math.nan, "pi": "uniform",
                       "dim": 3, "kappa_pi": 0.0, "tau": 0.1, "search_anchors": 256},
    "rot-vmf-d8": {"kernel": "rotated", "angle": math.pi / 3, "kappa_m": 10.0, "t": math.nan, "pi": "vmf",
                   "dim": 8, "kappa_pi": 2.0, "tau": 0.2, "search_anchors": 256},
    "brown-vmf-d3": {"kernel": "brownian", "angle": math.nan, "kappa_m": math.nan, "t": 0.2, "pi": "vmf",
                     "dim": 3, "kappa_pi": 2.0, "tau": 0.2, "search_anchors": 64},
    "brown-vmf-d8": {"kernel": "brownian", "angle": math.nan, "kappa_m": math.nan, "t": 0.2, "pi": "vmf",
                     "dim": 8, "kappa_pi": 4.0, "tau": 0.2, "search_anchors": 64},
    "vmf-uniform-d3": {"kernel": "vmf", "angle": math.nan, "kappa_m": 10.0, "t": math.nan, "pi": "uniform",
                       "dim": 3, "kappa_pi": 0.0, "tau": 0.1, "search_anchors": 256},
}

#: names of the per-block statistics: C1 (GapEstimator), C2 (SearchEstimator, its loss renamed)
C1_STATS = ("gap_cv", "gap_plain", "gap_cv_var", "loss", "dgap", "dgap_cv")
C2_STATS = ("d_cv", "d_rb", "d_plain", "d_cv_var", "pos_term", "snis_term", "loss_search", "ce", "top1", "recall")
ASYM_STATS = ("asym_cross", "asym_shift")


def build_kernel(cell: dict):
    """The positive kernel of a cell."""
    if cell["kernel"] == "rotated":
        return RotatedVMFKernel.plane_rotation(int(cell["dim"]), float(cell["angle"]), float(cell["kappa_m"]))
    if cell["kernel"] == "brownian":
        return BrownianKernel(float(cell["t"]))
    return VMFKernel(float(cell["kappa_m"]))


def build_pi(cell: dict):
    """The data distribution of a cell (rate_k's families: uniform, vMF with mean e_1, mixture)."""
    return rate_k.build_pi(cell)


def mean_map(kernel, d: int) -> np.ndarray:
    """B with ``E[x+ | x] = B x`` (exact): A_d(kappa) R, A_d(kappa) I or exp(-(d-1)t/2) I."""
    if isinstance(kernel, RotatedVMFKernel):
        return float(mean_resultant_length(d, kernel.kappa)) * kernel.rotation
    if isinstance(kernel, BrownianKernel):
        return kernel.mean_cosine(d) * np.eye(d)
    return float(mean_resultant_length(d, kernel.kappa)) * np.eye(d)


def asymmetry_exact(pi, kernel) -> tuple[float, float]:
    """Exact ``E[x_1 x+_2 - x_2 x+_1]`` and ``E[x+_1 - x_1]`` (first two coordinates; x ~ pi, x+ ~ M(x)).

    Both vanish when M is pi-reversible ((x, x+) is then exchangeable). With ``C = E[x x+^T] =
    E[x x^T] B^T`` (B from :func:`mean_map`) the first is ``C_12 - C_21``; the second is
    ``(B m - m)_1`` with ``m = E x``. Moments of a vMF mixture: ``E x = sum w A_d(kappa) mu``,
    ``E[x x^T] = sum w [(A/kappa) I + (1 - d A/kappa) mu mu^T]`` (I/d for kappa = 0).
    """
    d = pi.dim
    w, mus, kappas = pi.as_mixture()
    m, second = np.zeros(d), np.zeros((d, d))
    for wj, mu, k in zip(w, mus, kappas):
        a = float(mean_resultant_length(d, k)) if k > 0 else 0.0
        ak = 1.0 / d if k < 1e-8 else a / k
        m += wj * a * mu
        second += wj * (ak * np.eye(d) + (1.0 - d * ak) * np.outer(mu, mu))
    b = mean_map(kernel, d)
    c = second @ b.T
    return float(c[0, 1] - c[1, 0]), float((b @ m - m)[0])


def _attrs(long_name: str, units: str, description: str) -> dict:
    return {"long_name": long_name, "units": units, "description": description}


# ----------------------------------------------------------------------------------------------
# the analysis of one curve (rate_k's and search_ce's rules)

#: per-setting fields of :func:`analyse_curve` ("const" is c1 for gap_k and d1 for D_k)
CURVE_FIELDS = ("slope", "slope_se", "slope_ci_low", "slope_ci_high", "slope_p_half", "slope_p_one",
                "slope_verdict_low", "slope_verdict_high", "curvature", "slope_se_wls", "const_estimate",
                "const_estimate_mcse", "const2_estimate", "const2_estimate_mcse", "const_z", "k_min", "sign",
                "k_sign")


def analyse_curve(k: np.ndarray, blocks: np.ndarray, scale: float, k_min_factor: float, ref: float,
                  ref_mcse: float, *, test_constant: bool, failed_blocks: bool = False) -> dict:
    """Rate analysis of one curve (gap_k or D_k) from its replicate blocks, with the verdict.

    The rules of ``studies/rate_k.py`` (C1) and ``studies/search_ce.py`` (C2), built from the same
    helpers of :mod:`simkit.analysis`: k_min = smallest grid k >= ``k_min_factor * scale``; at
    least 4 grid points k >= k_min; the block means must keep one sign there (search_ce; for a
    positive curve this is rate_k's analysis exactly); WLS of log(sign x curve) on log k and 1/k
    (:func:`~simkit.analysis.fit_rate`, jackknife SE, 95% interval); WLS of the curve on 1/k and
    1/k^2 (:func:`~simkit.analysis.fit_inverse_powers`) for the constant. Pass when the
    level-(1 - ALPHA) interval contains -1, slope = -1/2 is rejected at ALPHA and, if
    ``test_constant`` (C1), |z| of the constant against ``ref`` is at most z_{1 - ALPHA/2}.

    Returns
    -------
    dict
        :data:`CURVE_FIELDS` (floats, NaN where undefined), ``fit_abs``, ``resid_rate`` and
        ``resid_const`` (arrays over k), ``verdict`` (pass, fail or error) and ``reason``.
    """
    out = {n: math.nan for n in CURVE_FIELDS}
    nan_k = np.full(k.size, np.nan)
    out.update(fit_abs=nan_k, resid_rate=nan_k.copy(), resid_const=nan_k.copy(), verdict="fail", reason="")
    mean, _ = mean_mcse(blocks, axis=0)
    blocks = blocks[np.all(np.isfinite(blocks), axis=1)]
    if not np.isfinite(scale):
        out.update(verdict="error", reason="preparation failed (see cell_error)")
        return out
    if blocks.shape[0] < 3:
        out.update(verdict="error" if failed_blocks else "fail", reason=f"too few finished blocks ({blocks.shape[0]})")
        return out
    k_min = choose_k_min(k, scale, k_min_factor)
    out["k_min"] = k_min
    sel = k >= k_min
    sgn = np.sign(mean)
    flips = np.nonzero(sgn[1:] != sgn[:-1])[0]
    out["k_sign"] = k[flips[-1] + 1] if flips.size else k[0]
    if np.sum(sel) < 4:
        out["reason"] = (f"k_max = {int(k[-1])} is too small: {int(np.sum(sel))} grid point(s) >= k_min = {k_min}, "
                         f"4 needed; raise k_max")
        return out
    signs = set(np.sign(mean[sel]).tolist())
    if len(signs) != 1 or 0.0 in signs:
        out["sign"] = 0.0
        out["reason"] = (f"the curve changes sign within the fit range k >= {k_min} (means "
                         f"{', '.join(f'{v:+.3g}' for v in mean[sel])}): no log-log fit")
        return out
    sign = signs.pop()
    out["sign"] = sign
    fit = fit_rate(k, sign * blocks, k_min, with_inverse=True, level=0.95)
    curve = fit_inverse_powers(k, blocks, k_min, n_terms=2)
    if not np.isfinite(fit.slope):
        out["reason"] = "the rate fit failed (a leave-one-block-out mean changed sign)"
        return out
    lo, hi = fit.interval(1 - ALPHA)
    z = z_score(curve.coef[0], curve.se[0], ref, ref_mcse)
    out.update(slope=fit.slope, slope_se=fit.slope_se, slope_ci_low=fit.ci_low, slope_ci_high=fit.ci_high,
               slope_p_half=fit.p_half, slope_p_one=fit.p_one, slope_verdict_low=lo, slope_verdict_high=hi,
               curvature=fit.curvature, slope_se_wls=fit.slope_se_wls, const_estimate=curve.coef[0],
               const_estimate_mcse=curve.se[0], const2_estimate=curve.coef[1], const2_estimate_mcse=curve.se[1],
               const_z=z, fit_abs=np.exp(fit.fitted), resid_rate=fit.std_resid, resid_const=curve.std_resid)
    zcrit = stats.norm.isf(ALPHA / 2)
    problems = []
    if not (lo <= -1.0 <= hi):
        problems.append(f"slope interval at level {1 - ALPHA:g} [{lo:.4f}, {hi:.4f}] excludes -1")
    if not (fit.p_half < ALPHA):
        problems.append(f"slope = -1/2 not rejected (p = {fit.p_half:.3g})")
    if test_constant and not (abs(z) <= zcrit):
        problems.append(f"c1 z-score {z:+.2f} beyond +-{zcrit:.2f}")
    out["verdict"] = "pass" if not problems else "fail"
    if failed_blocks:
        out["verdict"] = "error"
        problems.insert(0, "some block(s) failed (see cell_error); summaries use the finished blocks; run again "
                           "to retry")
    out["reason"] = "; ".join(problems)
    return out


# ----------------------------------------------------------------------------------------------
# the study

class Asymmetry(Study):
    name = "asymmetry"
    claim = "C7"
    title = "Claim C7: the 1/k rates of C1 and C2 hold for non-reversible positive kernels"
    cell_dim = "setting"
    ademp = {
        "aim": "C7: C1 (gap_k = c1/k + O(1/k^2)) and C2 (D_k = R_k - E CE(M_k, Q_k) = O(1/k)) hold when M is not "
               "pi-reversible",
        "data": "rotated vMF kernel vMF(Rx, kappa_M) over uniform pi (pi-invariant, not reversible) and over a vMF pi; "
                "Brownian kernel over a vMF pi (pi M != pi); optional reversible control (vMF kernel, uniform pi); "
                "phi = identity",
        "estimand": "gap_k and D_k on a geometric k grid, their log-log slopes, c1 and d1; non-reversibility "
                    "statistics E[x_1 x+_2 - x_2 x+_1] and E[x+_1 - x_1]",
        "methods": "rate_k's and search_ce's estimators (common random numbers across k, control variates with "
                   "exact conditional means, pilot coefficients) and analysis: WLS of log|curve| on log k and 1/k "
                   "for k >= k_min where the block means keep one sign; WLS on 1/k, 1/k^2; jackknife over blocks",
        "performance": "slopes with 95% and 99.9% CIs, p-values of slope = -1/2 and -1, c1 z-score, d1 z-score "
                       "(diagnostic), MCSE of every estimate, non-reversibility statistics against exact values",
    }
    params = {
        "settings": Param("settings", str, "rot-uniform-d3,rot-vmf-d8,brown-vmf-d3,brown-vmf-d8,vmf-uniform-d3",
                          "comma-separated settings", choices=tuple(SETTINGS), multi=True,
                          quick="rot-uniform-d3,rot-vmf-d8,brown-vmf-d3,brown-vmf-d8"),
        "k_max": Param("k_max", int, 16384, "negatives / database points per block (power of two); grid 1, 2, ..., "
                       "k_max", low=16, high=1 << 20, power_of_two=True, quick=8192),
        "n_blocks": Param("n_blocks", int, 64, "independent replicate blocks per setting", low=8, high=100000,
                          quick=24),
        "block_anchors": Param("block_anchors", int, 256, "InfoNCE anchors per block (C1, sharing its negatives)",
                               low=8, high=1 << 20),
        "search_anchors": Param("search_anchors", int, None, "queries per block (C2, sharing its database); "
                                "default: the setting's own (256 rotated and vMF, 64 Brownian)", low=8,
                                high=1 << 20),
        "rank_anchors": Param("rank_anchors", int, 32, "queries per block entering top-1 agreement and recall "
                              "(the first ones; at most the setting's queries)", low=1, high=1 << 20),
        "pilot_blocks": Param("pilot_blocks", int, 4, "pilot blocks for the control-variate coefficients",
                              low=2, high=64, quick=2),
        "k_min_factor": Param("k_min_factor", float, 16.0, "fit k >= k_min_factor * expansion scale", low=0.0),
        "n_mc": Param("n_mc", int, 1 << 18, "Monte Carlo size of exact constants without a closed form (c1 of the "
                      "rotated kernel, d1 and w2)", low=1024, high=1 << 24, quick=1 << 16),
        "n_asym": Param("n_asym", int, 4096, "pairs (x, x+) per block for the non-reversibility statistics",
                        low=16, high=1 << 22),
        "angle": Param("angle", float, None, "override the rotation angle (radians) of the rotated settings",
                       low=-math.pi, high=math.pi),
        "t": Param("t", float, None, "override the diffusion time of the Brownian settings", low=1e-6,
                   low_open=True, high=1e3),
    }

    def check_config(self, cfg):
        names = cfg["settings"].split(",")
        anchors = [cfg["search_anchors"] or SETTINGS[n]["search_anchors"] for n in names]
        if cfg["rank_anchors"] > min(anchors):
            raise ValueError(f"'rank_anchors' must be <= the queries per C2 block of every setting ({min(anchors)}), "
                             f"got {cfg['rank_anchors']}")
        for n in names:  # the Brownian kernel must be admissible for the per-pair series (ValueError names 't')
            cell = self._cell(n, cfg)
            if cell["kernel"] == "brownian":
                SearchEstimator(build_pi(cell), build_kernel(cell), cell["tau"], 16)

    def _cell(self, name: str, cfg: dict) -> dict:
        s = SETTINGS[name]
        cell = {"setting": name, **{k: v for k, v in s.items() if k != "search_anchors"}}
        if cell["kernel"] == "rotated" and cfg["angle"] is not None:
            cell["angle"] = float(cfg["angle"])
        if cell["kernel"] == "brownian" and cfg["t"] is not None:
            cell["t"] = float(cfg["t"])
        cell["search_anchors"] = int(cfg["search_anchors"] or s["search_anchors"])
        return cell

    def cells(self, cfg):
        return [self._cell(n, cfg) for n in cfg["settings"].split(",")]

    def _estimators(self, cell, cfg) -> tuple[GapEstimator, SearchEstimator]:
        pi, kernel = build_pi(cell), build_kernel(cell)
        return (GapEstimator(pi, kernel, cell["tau"], cfg["k_max"]),
                SearchEstimator(pi, kernel, cell["tau"], cfg["k_max"], n_top=N_TOP))

    def block_dims(self, cfg):
        dims = {n: ("k",) for n in (*C1_STATS, *C2_STATS)}
        dims.update({"ell_inf": (), **{n: () for n in ASYM_STATS}})
        return dims, {"k": k_grid(cfg["k_max"])}

    def prepare(self, cell, cfg, rng):
        r_c1, r_c2, r_const = rng.spawn(3)
        gest, sest = self._estimators(cell, cfg)
        pi, kernel, tau = gest.pi, gest.kernel, gest.tau
        out = {"c1_coef": gest.calibrate(cfg["block_anchors"], r_c1, n_blocks=cfg["pilot_blocks"]),
               "c2_coef": sest.calibrate(cell["search_anchors"], r_c2, n_blocks=cfg["pilot_blocks"])}
        # exact constants as rate_k (fixed default Monte Carlo seed) and search_ce (the prepare rng)
        c1 = exact.bias_constant(pi, kernel, tau, n_mc=cfg["n_mc"])
        ce = exact.cross_entropy(pi, kernel, tau, n_mc=cfg["n_mc"])
        rho, mbar = exact.expansion_scales(pi, kernel, tau, n_mc=cfg["n_mc"])
        for name, v in (("c1", c1), ("ce", ce)):
            val, se = (v.value, v.mcse) if isinstance(v, exact.Estimate) else (v, 0.0)
            out[f"{name}_exact"], out[f"{name}_exact_mcse"] = np.array(val), np.array(se)
        out["rho"], out["mbar"] = np.array(rho), np.array(mbar)
        for name, (v, se) in search_constants(pi, kernel, tau, n_mc=cfg["n_mc"], rng=r_const).items():
            out[f"{name}_exact"], out[f"{name}_exact_mcse"] = np.array(v), np.array(se)
        if isinstance(pi, Uniform) and isinstance(kernel, VMFKernel):
            out["gap_exact"] = exact.gap_exact(kernel, pi.dim, tau, gest.grid)
        else:
            out["gap_exact"] = np.full(gest.grid.size, np.nan)
        cross, shift = asymmetry_exact(pi, kernel)
        out["asym_cross_exact"], out["asym_shift_exact"] = np.array(cross), np.array(shift)
        return out

    def generate(self, cell, cfg, prep, rng):
        r_c1, r_c2, r_asym = rng.spawn(3)
        gest, sest = self._estimators(cell, cfg)
        c1 = gest.block(cfg["block_anchors"], r_c1, prep["c1_coef"])
        c2 = sest.block(cell["search_anchors"], r_c2, prep["c2_coef"],
                        rank_anchors=min(cfg["rank_anchors"], cell["search_anchors"]))
        out = {n: c1[n] for n in (*C1_STATS, "ell_inf")}
        out.update({n: c2["loss" if n == "loss_search" else n] for n in C2_STATS})
        x = gest.pi.rvs(cfg["n_asym"], rng=r_asym)
        xp = gest.kernel.sample(x, rng=r_asym)
        out["asym_cross"] = np.array(np.mean(x[:, 0] * xp[:, 1] - x[:, 1] * xp[:, 0]))
        out["asym_shift"] = np.array(np.mean(xp[:, 0] - x[:, 0]))
        return out

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        k = raw["k"].values
        n_set = raw.sizes["setting"]
        ds = raw.copy()
        S, K = ("setting",), ("setting", "k")
        a = _attrs
        mean = {n: mean_mcse(raw[f"raw_{n}"].values, axis=1)
                for n in (*C1_STATS, *C2_STATS, "ell_inf", *ASYM_STATS) if not n.endswith("_var")}
        scale_c1 = np.maximum(raw["prep_rho"].values, raw["prep_mbar"].values)
        scale_c2 = np.maximum(scale_c1, raw["prep_w2_exact"].values)
        new = {}
        analyses = (
            ("gap", "c1", "raw_gap_cv", scale_c1, True, "gap_k = R_k - log k - CE", "C1"),
            ("d", "d1", "raw_d_cv", scale_c2, False, "D_k = R_k - E CE(M_k, Q_k)", "C2"),
        )
        for var, const, raw_name, scale, test_const, what, claim in analyses:
            res = [analyse_curve(k, raw[raw_name].values[i], float(scale[i]), cfg["k_min_factor"],
                                 float(raw[f"prep_{const}_exact"].values[i]),
                                 float(raw[f"prep_{const}_exact_mcse"].values[i]), test_constant=test_const,
                                 failed_blocks=bool(str(raw["cell_error"].values[i])))
                   for i in range(n_set)]
            p, c2name = f"{var}_", ("c2" if const == "c1" else "d2")
            descr = {
                "slope": (f"log-log slope of |{var}_k|", "WLS of log(sign x curve) on log k and 1/k over k >= k_min"),
                "slope_se": (f"jackknife standard error of {p}slope", "delete-one-block jackknife"),
                "slope_ci_low": (f"95% interval for {p}slope, lower", "Student t, n_blocks - 1 df, jackknife SE"),
                "slope_ci_high": (f"95% interval for {p}slope, upper", "Student t, n_blocks - 1 df, jackknife SE"),
                "slope_p_half": (f"p-value of {p}slope = -1/2", "two-sided t test, jackknife SE"),
                "slope_p_one": (f"p-value of {p}slope = -1", "two-sided t test, jackknife SE"),
                "slope_verdict_low": (f"verdict interval for {p}slope, lower", f"level 1 - {ALPHA:g}"),
                "slope_verdict_high": (f"verdict interval for {p}slope, upper", f"level 1 - {ALPHA:g}"),
                "curvature": ("coefficient of 1/k in the log fit", f"models the O(1/k^2) term of {var}_k"),
                "slope_se_wls": ("naive WLS standard error of the slope",
                                 "ignores the correlation across k from common random numbers; for comparison"),
                "k_min": ("smallest k in the fits", "smallest grid k >= k_min_factor * expansion scale"),
                "sign": (f"sign of {var}_k in the fit range", "+1 or -1; 0 if the block means change sign for k >= "
                         "k_min (then no fit: the setting fails)"),
                "k_sign": (f"grid k from which the mean {var}_k keeps its sign", "diagnostic"),
            }
            for f, (ln, desc) in descr.items():
                new[f"{p}{f}"] = (S, np.array([r[f] for r in res], dtype=float), a(ln, "1", desc))
            units = "nat"
            new[f"{const}_estimate"] = (S, np.array([r["const_estimate"] for r in res]),
                                        a(f"estimated {const}", units,
                                          f"WLS of {var}_k on 1/k and 1/k^2 over k >= k_min"))
            new[f"{const}_estimate_mcse"] = (S, np.array([r["const_estimate_mcse"] for r in res]),
                                             a(f"MCSE of {const}_estimate", units, "delete-one-block jackknife"))
            new[f"{c2name}_estimate"] = (S, np.array([r["const2_estimate"] for r in res]),
                                         a(f"estimated {c2name}", units, "coefficient of 1/k^2"))
            new[f"{c2name}_estimate_mcse"] = (S, np.array([r["const2_estimate_mcse"] for r in res]),
                                              a(f"MCSE of {c2name}_estimate", units, "delete-one-block jackknife"))
            zdesc = (f"({const}_estimate - {const}_exact) / sqrt({const}_estimate_mcse^2 + {const}_exact_mcse^2)"
                     + ("" if test_const else "; diagnostic, not part of the verdict (d1 is derived here)"))
            new[f"{const}_z"] = (S, np.array([r["const_z"] for r in res]),
                                 a(f"z-score of {const}_estimate", "1", zdesc))
            new[f"fit_{var}_abs"] = (K, np.array([r["fit_abs"] for r in res]),
                                     a(f"fitted |{var}_k|", units, "exp of the WLS fit of log|curve| on log k and 1/k"))
            new[f"resid_{var}_rate"] = (K, np.array([r["resid_rate"] for r in res]),
                                        a("standardised residual of the rate fit", "1",
                                          "(log|curve| - fit) / (mcse / |curve|); only k >= k_min enter the fit"))
            new[f"resid_{const}"] = (K, np.array([r["resid_const"] for r in res]),
                                     a(f"standardised residual of the {const} fit", "1",
                                       f"({var}_k - {const}/k - {c2name}/k^2) / mcse; only k >= k_min enter the fit"))
            rule = (f"pass when the block means keep one sign for k >= k_min, the level-{1 - ALPHA:g} slope interval "
                    f"contains -1 and slope = -1/2 is rejected at {ALPHA:g}"
                    + (f", and |c1_z| <= {stats.norm.isf(ALPHA / 2):.2f}" if test_const else ""))
            new[f"verdict_{claim.lower()}"] = (S, np.array([r["verdict"] for r in res], dtype=str),
                                               a(f"verdict for the {claim} rate", "1", f"pass, fail or error; {rule}"))
            new[f"verdict_{claim.lower()}_reason"] = (S, np.array([r["reason"] for r in res], dtype=str),
                                                      a(f"why the {claim} check failed", "1", "empty when it passed"))
        v1, v2 = new["verdict_c1"][1], new["verdict_c2"][1]
        overall = np.array(["error" if "error" in (x, y) else "pass" if x == y == "pass" else "fail"
                            for x, y in zip(v1, v2)], dtype=str)
        new["verdict"] = (S, overall, a("verdict for C7 in this setting", "1",
                                        "pass when both verdict_c1 and verdict_c2 pass; error if a task failed"))
        # curves with their MCSE
        g, gse = mean["gap_cv"]
        d, dse = mean["d_cv"]
        curves = {
            "gap": (g, gse, "finite-k gap R_k - log k - CE", "block mean of the control-variate estimator G_k "
                    "(simkit.infonce)"),
            "gap_plain": (*mean["gap_plain"], "gap without control variates", "block mean of l_k - log k - l_inf"),
            "loss": (*mean["loss"], "InfoNCE risk R_k (C1 blocks)", "block mean of l_k"),
            "dgap": (*mean["dgap_cv"], "gap_k - gap_2k", "D_k - D_2k with its exactly centred control variate "
                     "(k <= K/4)"),
            "d": (d, dse, "D_k = R_k - E CE(M_k, Q_k)", "block mean of the control-variate estimator "
                  "(simkit.search.SearchEstimator)"),
            "d_rb": (*mean["d_rb"], "D_k without control variates", "positive's score replaced by its exact "
                     "conditional mean"),
            "d_plain": (*mean["d_plain"], "D_k, plain difference", "block mean of l_k - CE(M_k, Q_k)"),
            "pos_term": (*mean["pos_term"], "positive-weight term E log(1 + e^{s0}/S_k)", "first part of D_k"),
            "snis_term": (*mean["snis_term"], "self-normalisation term E[V_k/W_k] - E s(x, x+)", "second part of D_k"),
            "loss_search": (*mean["loss_search"], "InfoNCE risk R_k (C2 blocks)", "block mean of l_k"),
            "ce": (*mean["ce"], "E CE(M_k, Q_k)", "cross-entropy of ideal against softmax empirical retrieval"),
        }
        for name, (v, se, ln, desc) in curves.items():
            new[name] = (K, v, a(ln, "nat", desc))
            new[f"{name}_mcse"] = (K, se, a(f"MCSE of {name}", "nat", "sd over blocks / sqrt(n_blocks)"))
        new["k_gap"] = (K, g * k, a("k times gap", "nat", "approaches c1 as k grows"))
        new["k_gap_mcse"] = (K, gse * k, a("MCSE of k_gap", "nat", "k * gap_mcse"))
        new["k_d"] = (K, d * k, a("k times D_k", "nat", "approaches d1 as k grows"))
        new["k_d_mcse"] = (K, dse * k, a("MCSE of k_d", "nat", "k * d_mcse"))
        n_rank = cfg["rank_anchors"]
        for name, ln in (("top1", "top-1 agreement of Q_k and M_k"), ("recall", f"recall@{N_TOP} of Q_k against M_k")):
            new[name] = (K, mean[name][0], a(ln, "1", f"first min(rank_anchors = {n_rank}, queries) queries of each "
                                             f"block (simkit.search); NaN where k < {N_TOP} for recall"))
            new[f"{name}_mcse"] = (K, mean[name][1], a(f"MCSE of {name}", "1", "sd over blocks / sqrt(n_blocks)"))
        new["gap_exact"] = (K, raw["prep_gap_exact"].values, a("exact gap", "nat", "Laplace-transform formula "
                            "(simkit.exact.gap_exact); uniform pi with the vMF kernel only, NaN otherwise"))
        new["ce_estimate"] = (S, mean["ell_inf"][0],
                              a("Monte Carlo CE", "nat", "block mean of l_inf = -s(x,x+) + log Z(x)"))
        new["ce_estimate_mcse"] = (S, mean["ell_inf"][1], a("MCSE of ce_estimate", "nat", "sd over blocks / sqrt(n)"))
        exact_descr = {
            "c1": ("exact c1", "nat", "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.bias_constant): quadrature where "
                   "exact, Monte Carlo over x with exact inner terms for the rotated kernel"),
            "ce": ("exact cross-entropy CE(M, Q)", "nat", "simkit.exact.cross_entropy"),
            "d1": ("predicted d1", "nat", "E_x[m1/Z] - E_x Cov_M(m, s) (simkit.search.search_constants)"),
            "pos": ("predicted positive-weight constant E_x[m1/Z]", "nat", "k * pos_term -> pos"),
            "snis": ("predicted self-normalisation constant E_x Cov_M(m, s)", "nat", "k * snis_term -> -snis"),
            "w2": ("importance-weight second moment w2 = E_x E_pi[m^2]", "1", "expansion scale of V_k/W_k"),
        }
        for name, (ln, units, desc) in exact_descr.items():
            new[f"{name}_exact"] = (S, raw[f"prep_{name}_exact"].values, a(ln, units, desc))
            new[f"{name}_exact_mcse"] = (S, raw[f"prep_{name}_exact_mcse"].values,
                                         a(f"MCSE of {name}_exact", units, "0 where exact"))
        new["c1_scale"] = (S, scale_c1, a("expansion scale of gap_k", "1", "max(E[Z2/Z^2], E[m1/Z])"))
        new["c2_scale"] = (S, scale_c2, a("expansion scale of D_k", "1", "max(E[Z2/Z^2], E[m1/Z], w2)"))
        for name, ln, desc in (("asym_cross", "E[x_1 x+_2 - x_2 x+_1]", "antisymmetric part of the cross-moment "
                                "E[x x+^T] (coordinates 1, 2); 0 for a pi-reversible kernel"),
                               ("asym_shift", "E[x+_1 - x_1]", "shift of the first coordinate's mean from x to x+; "
                                "0 when pi is invariant for M")):
            est, se = mean[name]
            ex = raw[f"prep_{name}_exact"].values
            new[name] = (S, est, a(ln, "1", f"Monte Carlo over n_asym pairs per block; {desc}"))
            new[f"{name}_mcse"] = (S, se, a(f"MCSE of {name}", "1", "sd over blocks / sqrt(n_blocks)"))
            new[f"{name}_exact"] = (S, ex, a(f"exact {ln}", "1", "from E[x+ | x] = B x and the moments of pi"))
            with np.errstate(invalid="ignore", divide="ignore"):
                new[f"{name}_z"] = (S, (est - ex) / se, a(f"z-score of {name} against its exact value", "1",
                                                          "(estimate - exact) / MCSE; diagnostic of the sampler"))
        for name, (dims, values, attrs) in new.items():
            ds[name] = (dims, values)
            ds[name].attrs = attrs
        ds["k"].attrs = a("number of negatives / database size k", "1", "geometric grid 1, 2, 4, ..., k_max")
        coord_attrs = {
            "setting": ("design setting", "1", "name of the setting in studies/asymmetry.py SETTINGS"),
            "kernel": ("positive kernel family", "1", "rotated (vMF(Rx, kappa_M)), brownian (heat kernel, time t) "
                       "or vmf (vMF(x, kappa_M), the reversible control)"),
            "angle": ("rotation angle of R", "rad", "R rotates the (e_1, e_2) plane; NaN for other kernels"),
            "kappa_m": ("kernel concentration kappa_M", "1", "rotated and vMF kernels; NaN for the Brownian kernel"),
            "t": ("Brownian diffusion time t", "1", "generator Laplacian/2; NaN for the vMF kernels"),
            "pi": ("data distribution family", "1", "uniform or vmf (mean e_1); studies.rate_k.build_pi"),
            "dim": ("ambient dimension d", "1", "points on S^{d-1} in R^d"),
            "kappa_pi": ("concentration of pi", "1", "vMF concentration of pi (0 for uniform)"),
            "tau": ("temperature tau", "1", "score s(x, y) = x.y / tau"),
            "search_anchors": ("queries per C2 block", "1", "sharing one database of k_max points"),
        }
        for name, (ln, units, desc) in coord_attrs.items():
            ds[name].attrs = a(ln, units, desc)
        for v in [n for n in ds.data_vars if n.startswith("raw_")]:
            units = "1" if v in ("raw_top1", "raw_recall", "raw_asym_cross", "raw_asym_shift") else \
                "nat^2" if v.endswith("_var") else "nat"
            ds[v].attrs = a(f"per-block {v[4:]}", units, "raw replicate-block results (simkit.infonce.BLOCK_STATS, "
                            "simkit.search.SEARCH_STATS, non-reversibility statistics)")
        for v in [n for n in ds.data_vars if n.startswith("prep_")]:
            ds[v].attrs = a(f"per-setting constant {v[5:]}", "1", "from the prepare stage (control-variate "
                            "coefficients per k, exact or Monte Carlo constants)")
        ds.attrs["alpha"] = ALPHA
        ds.attrs["n_top"] = N_TOP
        return ds

    def report(self, ds, path):
        from simkit.report_asymmetry import asymmetry_report
        asymmetry_report(ds, path)

    def report_sections(self, doc, ds):
        from simkit.report_asymmetry import asymmetry_sections
        asymmetry_sections(doc, ds)

    def claim_rows(self, ds) -> list[dict]:
        """Two C7 checks over every setting: the C1 rate (with c1) and the C2 rate.

        Each estimate is the slope of the setting farthest from -1 in standard errors.
        """
        names = [str(s) for s in ds["setting"].values]
        n = len(names)
        zc = stats.norm.isf(ALPHA / 2)
        rows = []
        for var, claim, const, ffr, what in (
                ("gap", "c1", "c1", 1.0 - (1.0 - 2 * ALPHA) ** n,
                 f"C1 rate for non-reversible kernels: slope of log|gap_k| on log k (with 1/k term), {n} settings; "
                 f"one sign for k >= k_min, -1 in the level-{1 - ALPHA:g} interval, -1/2 rejected, |c1 z| <= {zc:.2f}"),
                ("d", "c2", "d1", 1.0 - (1.0 - ALPHA) ** n,
                 f"C2 rate for non-reversible kernels: slope of log|D_k| on log k (with 1/k term), D_k = R_k - E "
                 f"CE(M_k, Q_k), {n} settings; one sign for k >= k_min, -1 in the level-{1 - ALPHA:g} interval, "
                 f"-1/2 rejected")):
            slope, se = ds[f"{var}_slope"].values, ds[f"{var}_slope_se"].values
            worst = worst_slope(slope, se)
            verdicts = [str(v) for v in ds[f"verdict_{claim}"].values]
            overall = combine_verdicts(verdicts)
            detail = "; ".join(
                f"{s}: slope {slope[i]:.4f} ± {se[i]:.4f}, {const} {ds[f'{const}_estimate'].values[i]:.3f} ± "
                f"{ds[f'{const}_estimate_mcse'].values[i]:.3f} (exact {ds[f'{const}_exact'].values[i]:.3f}"
                + (f" ± {ds[f'{const}_exact_mcse'].values[i]:.3f}" if ds[f"{const}_exact_mcse"].values[i] > 0 else "")
                + f") -> {verdicts[i]}"
                + (f" ({ds[f'verdict_{claim}_reason'].values[i]})" if str(ds[f"verdict_{claim}_reason"].values[i])
                   else "")
                for i, s in enumerate(names))
            rows.append({"claim": "C7", "statistic": what, "estimate": float(slope[worst]),
                         "estimate_mcse": float(se[worst]), "false_fail_rate": float(ffr), "verdict": overall,
                         "detail": detail})
        return rows

    def summary_text(self, ds) -> str:
        lines = [f"{'setting':<16}{'C1 slope ± SE':>19}{'c1 est ± MCSE':>19}{'c1 exact':>18}{'z':>7}  "
                 f"{'C2 slope ± SE':>19}{'d1 est ± MCSE':>19}{'d1 pred.':>18}  verdict C1/C2"]
        for i, s in enumerate(ds["setting"].values):
            v = {n: ds[n].values[i] for n in ("gap_slope", "gap_slope_se", "c1_estimate", "c1_estimate_mcse",
                                             "c1_exact", "c1_exact_mcse", "c1_z", "d_slope", "d_slope_se",
                                             "d1_estimate", "d1_estimate_mcse", "d1_exact", "d1_exact_mcse")}
            lines.append(
                f"{s:<16}{v['gap_slope']:>10.4f} ± {v['gap_slope_se']:<6.4f}{v['c1_estimate']:>10.3f} ± "
                f"{v['c1_estimate_mcse']:<6.3f}{v['c1_exact']:>10.3f} ± {v['c1_exact_mcse']:<5.3f}{v['c1_z']:>+7.2f}  "
                f"{v['d_slope']:>10.4f} ± {v['d_slope_se']:<6.4f}{v['d1_estimate']:>10.3f} ± "
                f"{v['d1_estimate_mcse']:<6.3f}{v['d1_exact']:>10.3f} ± {v['d1_exact_mcse']:<5.3f}  "
                f"{ds['verdict_c1'].values[i]}/{ds['verdict_c2'].values[i]}")
        lines.append("")
        lines.append(f"{'non-reversibility':<18}{'E[x1 x+2 - x2 x+1]: MC ± MCSE (exact)':>42}"
                     f"{'E[x+1 - x1]: MC ± MCSE (exact)':>40}")
        for i, s in enumerate(ds["setting"].values):
            lines.append(f"{s:<18}{ds['asym_cross'].values[i]:>17.4f} ± {ds['asym_cross_mcse'].values[i]:.4f} "
                         f"({ds['asym_cross_exact'].values[i]:+.4f}){'':>6}"
                         f"{ds['asym_shift'].values[i]:>15.4f} ± {ds['asym_shift_mcse'].values[i]:.4f} "
                         f"({ds['asym_shift_exact'].values[i]:+.4f})")
        return "\n".join(lines)


STUDY = Asymmetry()

if __name__ == "__main__":
    from simkit.cli import main
    sys.exit(main(["run", "asymmetry", *sys.argv[1:]]))
