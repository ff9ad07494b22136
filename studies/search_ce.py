"""Claim C2: InfoNCE learns empirical similarity search; R_k - E CE(M_k, Q_k) = O(1/k).

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        C2 (THEORY.md section 3): for a query x ~ pi and a database of k unseen points
           y_1..y_k ~ pi, D_k = R_k - E CE(M_k, Q_k) = O(1/k), where Q_k is the empirical softmax
           kernel e^{s_j}/sum_i e^{s_i} and M_k the ideal empirical kernel m_j / sum_i m_i.
Data       phi = identity on S^{d-1}; uniform pi in d = 3 with a vMF kernel and tau = 1/kappa_M
           (then Q = M: a control whose retrieval agreement is exactly 1), a single vMF pi in
           d = 8 and the vMF mixture pi of rate_k in d = 16 (rate_k.build_pi); positives from a
           vMF kernel; one database of K_max points per replicate block, shared by its queries.
Estimand   D_k on k = 1, 2, 4, ..., K_max; its log-log slope; top-1 agreement and recall@10 of
           Q_k against M_k for k >= 10.
Methods    One streaming pass per block gives every k (common random numbers; simkit.search);
           D_k = E log(1 + e^{s0}/S_k) + E[V_k/W_k - mu_s(x)] with the positive's score replaced
           by its exact conditional mean and six control variates with exactly zero conditional
           mean, coefficients from an independent pilot; WLS of log |D_k| on log k and 1/k over
           k >= k_min (k_min = smallest grid k >= 16 x the expansion scale, fixed in advance);
           WLS of D_k on 1/k, 1/k^2 for d1; jackknife over independent blocks.
Performance  Slope with 95% and 99.9% intervals, tests of slope = -1/2 and -1; d1 against its
           derived value (z-score, diagnostic); retrieval metrics with MCSE; every D_k with its
           MCSE; variance-reduction factors; residuals.

Run it: ``simkit run search_ce`` or ``python studies/search_ce.py`` (same options).
"""

from __future__ import annotations

import sys

import numpy as np
import xarray as xr

from simkit import VMFKernel, exact
from simkit.analysis import (choose_k_min, combine_verdicts, fit_inverse_powers, fit_rate, mean_mcse, worst_slope,
                             z_score)
from simkit.engine import Param, Study
from simkit.infonce import k_grid
from simkit.search import N_TOP, SearchEstimator, search_constants
from studies.rate_k import MIXTURE_SEED, MIXTURE_WEIGHTS, build_pi

#: false-failure rate of each per-setting slope check
ALPHA = 1e-3

#: the design catalogue: name -> (pi family, dim, kappa_pi, kappa_m, tau). uniform-d3 and vmf-d8 are
#: rate_k's; the mixture uses rate_k's pi (build_pi) with kappa_M = 10 instead of 20: at 20 the
#: importance weights' second moment w2 = E m(x, x+) is ~965 (tail up to 1e5), so the expansion
#: regime k >= 16 w2 would start beyond 2^18; at 10, w2 = 36.6.
SETTINGS = {
    "uniform-d3": ("uniform", 3, 0.0, 10.0, 0.1),
    "vmf-d8": ("vmf", 8, 2.0, 10.0, 0.2),
    "mixture-d16": ("mixture", 16, 6.0, 10.0, 0.25),
    "uniform-d16": ("uniform", 16, 0.0, 8.0, 0.125),
}

#: grid points at which the summary text and the report tabulate the retrieval metrics
RETRIEVAL_K = (16, 256, 4096)


def _attrs(long_name: str, units: str, description: str) -> dict:
    return {"long_name": long_name, "units": units, "description": description}


class SearchCE(Study):
    name = "search_ce"
    claim = "C2"
    title = "Claim C2: InfoNCE risk minus the cross-entropy of empirical similarity search is O(1/k)"
    cell_dim = "setting"
    ademp = {
        "aim": "C2: D_k = R_k - E CE(M_k, Q_k) = O(1/k) for a database of k unseen points (slope -1, not -1/2)",
        "data": "uniform, vMF and vMF-mixture pi on S^{d-1}; vMF positive kernel; phi = identity; one database of "
                "K_max points per block shared by its queries",
        "estimand": "D_k on a geometric k grid; its log-log slope; d1 = lim k D_k; top-1 agreement and recall@10 "
                    "of Q_k against M_k",
        "methods": "streaming prefix sums S_k, W_k, V_k over the database (common random numbers across k); the "
                   "positive's score replaced by its exact conditional mean; six control variates with exactly zero "
                   "conditional mean, pilot coefficients; WLS of log|D_k| on log k and 1/k for k >= k_min; WLS of D_k "
                   "on 1/k, 1/k^2; jackknife over independent blocks",
        "performance": "slope with 95% CI, p-values of slope = -1/2 and -1, d1 z-score (diagnostic), MCSE of every "
                       "estimate, retrieval metrics with MCSE",
    }
    params = {
        "settings": Param("settings", str, "uniform-d3,vmf-d8,mixture-d16", "comma-separated settings",
                          choices=tuple(SETTINGS), multi=True),
        "k_max": Param("k_max", int, 65536, "database points per block (power of two); grid 1, 2, ..., k_max",
                       low=16, high=1 << 20, power_of_two=True, quick=16384),
        "n_blocks": Param("n_blocks", int, 64, "independent replicate blocks per setting", low=8, high=100000,
                          quick=32),
        "block_anchors": Param("block_anchors", int, 256, "queries per block (sharing its database)",
                               low=8, high=1 << 20),
        "rank_anchors": Param("rank_anchors", int, 256, "queries per block entering top-1 agreement and recall "
                              "(the first ones; at most block_anchors)", low=1, high=1 << 20),
        "pilot_blocks": Param("pilot_blocks", int, 4, "pilot blocks for the control-variate coefficients",
                              low=2, high=64, quick=2),
        "k_min_factor": Param("k_min_factor", float, 16.0,
                              "fit k >= k_min_factor * max(E[Z2/Z^2], E[m1/Z], w2)", low=0.0),
        "n_mc": Param("n_mc", int, 1 << 18, "Monte Carlo size for d1 and the expansion scales (non-uniform pi)",
                      low=1024, high=1 << 24),
        "dim": Param("dim", int, None, "override the dimension d of every setting", low=2, high=4096),
        "tau": Param("tau", float, None, "override the temperature of every setting", low=0.005),
        "kappa_m": Param("kappa_m", float, None, "override the kernel concentration of every setting",
                         low=0.0, high=150.0),
        "kappa_pi": Param("kappa_pi", float, None, "override the concentration of pi (vMF and mixture settings)",
                          low=0.0, high=1e6),
    }

    def check_config(self, cfg):
        if cfg["rank_anchors"] > cfg["block_anchors"]:
            raise ValueError(f"'rank_anchors' must be <= block_anchors = {cfg['block_anchors']}, "
                             f"got {cfg['rank_anchors']}")

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            family, d, kp, km, tau = SETTINGS[name]
            out.append({
                "setting": name,
                "pi": family,
                "dim": int(cfg["dim"] if cfg["dim"] is not None else d),
                "kappa_pi": float(cfg["kappa_pi"] if cfg["kappa_pi"] is not None and family != "uniform" else kp),
                "kappa_m": float(cfg["kappa_m"] if cfg["kappa_m"] is not None else km),
                "tau": float(cfg["tau"] if cfg["tau"] is not None else tau),
            })
        return out

    def _estimator(self, cell, cfg) -> SearchEstimator:
        return SearchEstimator(build_pi(cell), VMFKernel(cell["kappa_m"]), cell["tau"], cfg["k_max"], n_top=N_TOP)

    def block_dims(self, cfg):
        names = ("d_cv", "d_rb", "d_plain", "d_cv_var", "pos_term", "snis_term", "loss", "ce", "top1", "recall")
        return {n: ("k",) for n in names}, {"k": k_grid(cfg["k_max"])}

    def prepare(self, cell, cfg, rng):
        est = self._estimator(cell, cfg)
        coef = est.calibrate(cfg["block_anchors"], rng, n_blocks=cfg["pilot_blocks"])
        const = search_constants(est.pi, est.kernel, est.tau, n_mc=cfg["n_mc"], rng=rng)
        rho, mbar = exact.expansion_scales(est.pi, est.kernel, est.tau, n_mc=cfg["n_mc"])
        out = {"coef": coef, "rho": np.array(rho), "mbar": np.array(mbar)}
        for name, (v, se) in const.items():
            out[f"{name}_exact"] = np.array(v)
            out[f"{name}_exact_mcse"] = np.array(se)
        return out

    def generate(self, cell, cfg, prep, rng):
        return self._estimator(cell, cfg).block(cfg["block_anchors"], rng, prep["coef"],
                                                rank_anchors=cfg["rank_anchors"])

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        k = raw["k"].values
        n_set = raw.sizes["setting"]
        ds = raw.copy()
        mean = {}
        for name in ("d_cv", "d_rb", "d_plain", "pos_term", "snis_term", "loss", "ce", "top1", "recall"):
            mean[name] = mean_mcse(raw[f"raw_{name}"].values, axis=1)
        d, d_se = mean["d_cv"]
        fields = {n: np.full(n_set, np.nan) for n in (
            "slope", "slope_se", "slope_ci_low", "slope_ci_high", "slope_p_half", "slope_p_one",
            "slope_verdict_low", "slope_verdict_high", "curvature", "slope_se_wls", "d1_estimate",
            "d1_estimate_mcse", "d2_estimate", "d2_estimate_mcse", "d1_z", "k_min", "d_sign", "k_sign")}
        fit_abs = np.full((n_set, k.size), np.nan)
        resid_rate = np.full((n_set, k.size), np.nan)
        resid_d1 = np.full((n_set, k.size), np.nan)
        verdict = np.array(["fail"] * n_set, dtype=object)
        reasons = np.array([""] * n_set, dtype=object)
        scale = np.maximum.reduce([raw["prep_rho"].values, raw["prep_mbar"].values, raw["prep_w2_exact"].values])
        for i in range(n_set):
            blocks = raw["raw_d_cv"].values[i]
            blocks = blocks[np.all(np.isfinite(blocks), axis=1)]
            if not np.isfinite(scale[i]):
                reasons[i] = "preparation failed (see cell_error)"
                verdict[i] = "error"
                continue
            if blocks.shape[0] < 3:
                reasons[i] = f"too few finished blocks ({blocks.shape[0]})"
                verdict[i] = "error" if str(raw["cell_error"].values[i]) else "fail"
                continue
            k_min = choose_k_min(k, scale[i], cfg["k_min_factor"])
            fields["k_min"][i] = k_min
            sel = k >= k_min
            # the last grid point from which the mean D_k keeps one sign (diagnostic)
            sgn = np.sign(d[i])
            flips = np.nonzero(sgn[1:] != sgn[:-1])[0]
            fields["k_sign"][i] = k[flips[-1] + 1] if flips.size else k[0]
            if np.sum(sel) < 4:
                reasons[i] = (f"k_max = {int(k[-1])} is too small: {int(np.sum(sel))} grid point(s) >= "
                              f"k_min = {k_min}, 4 needed; raise k_max")
                continue
            signs = set(np.sign(d[i][sel]).tolist())
            if len(signs) != 1 or 0.0 in signs:
                fields["d_sign"][i] = 0.0
                reasons[i] = (f"D_k changes sign within the fit range k >= {k_min} (means "
                              f"{', '.join(f'{v:+.3g}' for v in d[i][sel])}): no log-log fit of |D_k|")
                continue
            sign = signs.pop()
            fields["d_sign"][i] = sign
            fit = fit_rate(k, sign * blocks, k_min, with_inverse=True, level=0.95)
            curve = fit_inverse_powers(k, blocks, k_min, n_terms=2)
            if not np.isfinite(fit.slope):
                reasons[i] = "the rate fit failed (a leave-one-block-out mean of |D_k| changed sign)"
                continue
            lo, hi = fit.interval(1 - ALPHA)
            for name, value in (("slope", fit.slope), ("slope_se", fit.slope_se), ("slope_ci_low", fit.ci_low),
                                ("slope_ci_high", fit.ci_high), ("slope_p_half", fit.p_half),
                                ("slope_p_one", fit.p_one), ("slope_verdict_low", lo), ("slope_verdict_high", hi),
                                ("curvature", fit.curvature), ("slope_se_wls", fit.slope_se_wls),
                                ("d1_estimate", curve.coef[0]), ("d1_estimate_mcse", curve.se[0]),
                                ("d2_estimate", curve.coef[1]), ("d2_estimate_mcse", curve.se[1])):
                fields[name][i] = value
            fit_abs[i] = np.exp(fit.fitted)
            resid_rate[i] = fit.std_resid
            resid_d1[i] = curve.std_resid
            fields["d1_z"][i] = z_score(curve.coef[0], curve.se[0], float(raw["prep_d1_exact"].values[i]),
                                        float(raw["prep_d1_exact_mcse"].values[i]))
            problems = []
            if not (lo <= -1.0 <= hi):
                problems.append(f"slope interval at level {1 - ALPHA:g} [{lo:.4f}, {hi:.4f}] excludes -1")
            if not (fit.p_half < ALPHA):
                problems.append(f"slope = -1/2 not rejected (p = {fit.p_half:.3g})")
            verdict[i] = "pass" if not problems else "fail"
            if str(raw["cell_error"].values[i]):
                verdict[i] = "error"
                problems.insert(0, f"{raw.sizes['block'] - blocks.shape[0]} block(s) failed (see cell_error); "
                                   "summaries use the finished blocks; run again to retry")
            reasons[i] = "; ".join(problems)
        S, K = ("setting",), ("setting", "k")
        a = _attrs
        new = {
            "d": (K, d, a("D_k = R_k - E CE(M_k, Q_k)", "nat",
                          "block mean of the control-variate estimator (simkit.search.SearchEstimator)")),
            "d_mcse": (K, d_se, a("Monte Carlo standard error of d", "nat", "sd over blocks / sqrt(n_blocks)")),
            "d_abs": (K, np.abs(d), a("|D_k|", "nat", "absolute value of d (the log-log fit uses d_sign * d)")),
            "k_d": (K, d * k, a("k times D_k", "nat", "approaches d1 as k grows")),
            "k_d_mcse": (K, d_se * k, a("MCSE of k_d", "nat", "k * d_mcse")),
            "fit_d_abs": (K, fit_abs, a("fitted |D_k|", "nat", "exp of the WLS fit of log|D_k| on log k and 1/k")),
            "resid_rate": (K, resid_rate, a("standardised residual of the rate fit", "1",
                                            "(log|D_k| - fit) / (d_mcse / |D_k|); only k >= k_min enter the fit")),
            "resid_d1": (K, resid_d1, a("standardised residual of the d1 fit", "1",
                                        "(D_k - d1/k - d2/k^2) / d_mcse; only k >= k_min enter the fit")),
        }
        plain_descr = {
            "d_rb": ("D_k without control variates", "positive's score replaced by its exact conditional mean "
                     "mu_s(x) (Rao-Blackwellised), no control variate"),
            "d_plain": ("D_k, plain difference", "block mean of l_k - CE(M_k, Q_k) with the positive's own score"),
            "pos_term": ("positive-weight term E log(1 + e^{s0}/S_k)", "first part of D_k: R_k - E log S_k"),
            "snis_term": ("self-normalisation term E[V_k/W_k] - E s(x, x+)", "second part of D_k: the bias of the "
                          "ideal retrieval's estimate of the mean positive score"),
            "loss": ("InfoNCE risk R_k", "block mean of l_k = -s0 + log(e^{s0} + S_k)"),
            "ce": ("E CE(M_k, Q_k)", "block mean of log S_k - V_k/W_k: cross-entropy of ideal against softmax "
                   "empirical retrieval"),
        }
        for name, (ln, desc) in plain_descr.items():
            new[name] = (K, mean[name][0], a(ln, "nat", desc))
            new[f"{name}_mcse"] = (K, mean[name][1], a(f"MCSE of {name}", "nat", "sd over blocks / sqrt(n_blocks)"))
        n_rank = min(cfg["rank_anchors"], cfg["block_anchors"])
        new["top1"] = (K, mean["top1"][0], a("top-1 agreement of Q_k and M_k", "1",
                       f"fraction of queries with argmax_j Q_k(x, y_j) = argmax_j M_k(x, y_j); the first {n_rank} "
                       f"queries of each block"))
        new["top1_mcse"] = (K, mean["top1"][1], a("MCSE of top1", "1", "sd over blocks / sqrt(n_blocks)"))
        new["recall"] = (K, mean["recall"][0], a(f"recall@{N_TOP} of Q_k against M_k", "1",
                         f"mean |top-{N_TOP}(Q_k) cap top-{N_TOP}(M_k)| / {N_TOP} over the first {n_rank} queries of "
                         f"each block; NaN where k < {N_TOP}"))
        new["recall_mcse"] = (K, mean["recall"][1], a("MCSE of recall", "1", "sd over blocks / sqrt(n_blocks)"))
        for name, ln, desc in (("d1", "predicted d1", "E_x[m1/Z] - E_x Cov_M(m, s) (derived here; "
                                "simkit.search.search_constants)"),
                               ("pos", "predicted positive-weight constant E_x[m1/Z]", "k * pos_term -> pos"),
                               ("snis", "predicted self-normalisation constant E_x Cov_M(m, s)",
                                "k * snis_term -> -snis"),
                               ("w2", "importance-weight second moment w2 = E_x E_pi[m^2]",
                                "expansion scale of V_k/W_k")):
            units = "1" if name == "w2" else "nat"
            new[f"{name}_exact"] = (S, raw[f"prep_{name}_exact"].values, a(ln, units, desc + "; exact (quadrature) "
                                    "for uniform pi, Monte Carlo over (x, y ~ M(x)) otherwise"))
            new[f"{name}_exact_mcse"] = (S, raw[f"prep_{name}_exact_mcse"].values,
                                         a(f"MCSE of {name}_exact", units, "0 where exact"))
        new["expansion_scale"] = (S, scale, a("expansion scale", "1", "max(E[Z2/Z^2], E[m1/Z], w2); k_min = smallest "
                                              "grid k >= k_min_factor * scale"))
        descr = {
            "slope": ("log-log slope of |D_k|", "1", "WLS of log(d_sign D_k) on log k and 1/k over k >= k_min"),
            "slope_se": ("jackknife standard error of slope", "1", "delete-one-block jackknife"),
            "slope_ci_low": ("95% interval for slope, lower", "1", "Student t, n_blocks - 1 df, jackknife SE"),
            "slope_ci_high": ("95% interval for slope, upper", "1", "Student t, n_blocks - 1 df, jackknife SE"),
            "slope_p_half": ("p-value of slope = -1/2", "1", "two-sided t test, jackknife SE"),
            "slope_p_one": ("p-value of slope = -1", "1", "two-sided t test, jackknife SE"),
            "slope_verdict_low": ("verdict interval for slope, lower", "1", f"level 1 - {ALPHA:g}"),
            "slope_verdict_high": ("verdict interval for slope, upper", "1", f"level 1 - {ALPHA:g}"),
            "curvature": ("coefficient of 1/k in the log fit", "1", "models the O(1/k^2) term of D_k"),
            "slope_se_wls": ("naive WLS standard error of slope", "1",
                             "ignores the correlation across k from common random numbers; for comparison"),
            "d1_estimate": ("estimated d1", "nat", "WLS of D_k on 1/k and 1/k^2 over k >= k_min"),
            "d1_estimate_mcse": ("MCSE of d1_estimate", "nat", "delete-one-block jackknife"),
            "d2_estimate": ("estimated d2", "nat", "coefficient of 1/k^2"),
            "d2_estimate_mcse": ("MCSE of d2_estimate", "nat", "delete-one-block jackknife"),
            "d1_z": ("z-score of d1_estimate against d1_exact", "1",
                     "(d1_estimate - d1_exact) / sqrt(d1_estimate_mcse^2 + d1_exact_mcse^2); diagnostic, not part "
                     "of the verdict (d1 is derived here, not in the paper)"),
            "k_min": ("smallest k in the fits", "1", "smallest grid k >= k_min_factor * expansion_scale"),
            "d_sign": ("sign of D_k in the fit range", "1", "+1 or -1; 0 if the means change sign for k >= k_min"),
            "k_sign": ("grid k from which mean D_k keeps its sign", "1",
                       "diagnostic: D_1 > 0 always, so a negative d1 implies one sign change"),
        }
        for name, (ln, units, desc) in descr.items():
            new[name] = (S, fields[name], a(ln, units, desc))
        new["verdict"] = (S, verdict.astype(str), a("verdict for C2", "1",
                          f"pass, fail or error (a task failed); pass when D_k keeps one sign for k >= k_min, the "
                          f"level-{1 - ALPHA:g} interval of the slope of log|D_k| contains -1 and slope = -1/2 is "
                          f"rejected at {ALPHA:g}"))
        new["verdict_reason"] = (S, reasons.astype(str), a("why a setting failed", "1", "empty when it passed"))
        for name, (dims, values, attrs) in new.items():
            ds[name] = (dims, values)
            ds[name].attrs = attrs
        ds["k"].attrs = a("database size k", "1", "geometric grid 1, 2, 4, ..., k_max")
        ds["setting"].attrs = a("design setting", "1", "name of the setting in studies/search_ce.py SETTINGS")
        ds["dim"].attrs = a("ambient dimension d", "1", "points on S^{d-1} in R^d")
        ds["pi"].attrs = a("data distribution family", "1", "uniform, vmf (mean e_1) or mixture "
                           f"(weights {MIXTURE_WEIGHTS}, means from seed {MIXTURE_SEED}; studies.rate_k.build_pi)")
        ds["kappa_pi"].attrs = a("concentration of pi", "1", "vMF concentration of pi or of each mixture component")
        ds["kappa_m"].attrs = a("kernel concentration kappa_M", "1", "M(x, .) = vMF(x, kappa_M)")
        ds["tau"].attrs = a("temperature tau", "1", "score s(x, y) = x.y / tau")
        for v in [n for n in ds.data_vars if n.startswith("raw_")]:
            units = "1" if v in ("raw_top1", "raw_recall") else "nat^2" if v == "raw_d_cv_var" else "nat"
            ds[v].attrs = a(f"per-block {v[4:]}", units, "raw replicate-block results (simkit.search.SEARCH_STATS)")
        for v in [n for n in ds.data_vars if n.startswith("prep_")]:
            ds[v].attrs = a(f"per-setting constant {v[5:]}", "1",
                            "from the prepare stage (control-variate coefficients of simkit.search.CONTROL_VARIATES "
                            "per k, exact or Monte Carlo constants)")
        ds.attrs["alpha"] = ALPHA
        ds.attrs["n_top"] = N_TOP
        return ds

    def report(self, ds, path):
        from simkit.report_search import search_ce_report
        search_ce_report(ds, path)

    def report_sections(self, doc, ds):
        from simkit.report_search import search_ce_sections
        search_ce_sections(doc, ds)

    def claim_rows(self, ds) -> list[dict]:
        """One C2 check: every setting's verdict (one sign in the fit range, slope interval, -1/2 rejected).

        The estimate is the slope of the setting farthest from -1 in standard errors.
        """
        slope, se = ds["slope"].values, ds["slope_se"].values
        worst = worst_slope(slope, se)
        verdicts = [str(v) for v in ds["verdict"].values]
        n = len(verdicts)
        overall = combine_verdicts(verdicts)
        detail = "; ".join(
            f"{s}: slope {ds['slope'].values[i]:.4f} ± {ds['slope_se'].values[i]:.4f}, "
            f"d1 {ds['d1_estimate'].values[i]:.3f} ± {ds['d1_estimate_mcse'].values[i]:.3f} (predicted "
            f"{ds['d1_exact'].values[i]:.3f}), top-1 {ds['top1'].values[i][-1]:.3f}, recall@{N_TOP} "
            f"{ds['recall'].values[i][-1]:.3f} at k = {int(ds['k'].values[-1])} -> {verdicts[i]}"
            + (f" ({ds['verdict_reason'].values[i]})" if str(ds['verdict_reason'].values[i]) else "")
            for i, s in enumerate(ds["setting"].values))
        return [{
            "claim": "C2",
            "statistic": f"slope of log|D_k| on log k (with 1/k term), D_k = R_k - E CE(M_k, Q_k), {n} settings; "
                         f"-1 in the level-{1 - ALPHA:g} interval, -1/2 rejected",
            "estimate": float(slope[worst]),
            "estimate_mcse": float(se[worst]),
            "false_fail_rate": float(1.0 - (1.0 - ALPHA) ** n),
            "verdict": overall,
            "detail": detail,
        }]

    def summary_text(self, ds) -> str:
        k = ds["k"].values
        lines = [f"{'setting':<13}{'slope ± SE':>19}{'99.9% CI':>20}{'p(-1/2)':>10}{'d1 est ± MCSE':>20}"
                 f"{'d1 predicted':>20}{'z':>7}  verdict"]
        for i, s in enumerate(ds["setting"].values):
            lines.append(
                f"{s:<13}{ds['slope'].values[i]:>10.4f} ± {ds['slope_se'].values[i]:<6.4f}  "
                f"[{ds['slope_verdict_low'].values[i]:.4f}, {ds['slope_verdict_high'].values[i]:.4f}]"
                f"{ds['slope_p_half'].values[i]:>10.1e}"
                f"{ds['d1_estimate'].values[i]:>11.3f} ± {ds['d1_estimate_mcse'].values[i]:<6.3f}"
                f"{ds['d1_exact'].values[i]:>11.3f} ± {ds['d1_exact_mcse'].values[i]:<6.3f}"
                f"{ds['d1_z'].values[i]:>+7.2f}  {ds['verdict'].values[i]}")
        ks = [kk for kk in (*RETRIEVAL_K, int(k[-1])) if kk in k]
        ks = sorted(set(ks))
        lines.append("")
        lines.append(f"{'retrieval':<13}" + "".join(f"{'k = ' + str(kk):>38}" for kk in ks))
        for i, s in enumerate(ds["setting"].values):
            cells = []
            for kk in ks:
                g = int(np.nonzero(k == kk)[0][0])
                cells.append(f"top1 {ds['top1'].values[i, g]:.3f}±{ds['top1_mcse'].values[i, g]:.3f} "
                             f"R@{N_TOP} {ds['recall'].values[i, g]:.3f}±{ds['recall_mcse'].values[i, g]:.3f}")
            lines.append(f"{s:<13}" + "".join(f"{c:>38}" for c in cells))
        return "\n".join(lines)


STUDY = SearchCE()

if __name__ == "__main__":
    from simkit.cli import main
    sys.exit(main(["run", "search_ce", *sys.argv[1:]]))
