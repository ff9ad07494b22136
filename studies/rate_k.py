"""Claim C1: the finite-k bias of InfoNCE decays at rate 1/k, with constant c1.

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        C1 (THEORY.md section 3): gap_k = R_k - log k - CE(M, Q) = c1/k + O(1/k^2), not O(1/sqrt k).
Data       Synthetic settings on S^{d-1} with phi = identity: uniform pi with a vMF kernel and
           tau = 1/kappa (then Q = M), a single vMF pi, and a vMF mixture pi in d = 16; positives
           from a vMF kernel; K_max negatives per replicate block, shared by its anchors.
Estimand   gap_k on k = 1, 2, 4, ..., K_max; its log-log slope; c1.
Methods    Streaming InfoNCE estimator with common random numbers across k and control variates
           with exactly known conditional means (simkit.infonce); WLS of log gap_k on log k and
           1/k over k >= k_min (statsmodels); WLS of gap_k on 1/k, 1/k^2 for c1; jackknife over
           independent blocks for every standard error.
Performance  Slope with 95% interval and tests of slope = -1/2 and -1; c1 estimate against the exact
           c1 (z-score); every gap with its MCSE; residuals.

Run it: ``simkit run rate_k`` or ``python studies/rate_k.py`` (same options).
"""

from __future__ import annotations

import sys

import numpy as np
import xarray as xr
from scipy import stats

from simkit import Uniform, VMFKernel, VMFMixture, VonMisesFisher, exact
from simkit.analysis import (choose_k_min, combine_verdicts, fit_inverse_powers, fit_rate, mean_mcse, worst_slope,
                             z_score)
from simkit.engine import Param, Study
from simkit.infonce import GapEstimator, k_grid

#: false-failure rate of each per-setting check (slope interval, c1 z-test)
ALPHA = 1e-3
#: the mixture's means are fixed by this seed (documented in the dataset) and its weights below
MIXTURE_SEED = 7
MIXTURE_WEIGHTS = (0.4, 0.3, 0.2, 0.1)

#: the design catalogue: name -> (pi family, dim, kappa_pi, kappa_m, tau)
SETTINGS = {
    "uniform-d3": ("uniform", 3, 0.0, 10.0, 0.1),
    "vmf-d8": ("vmf", 8, 2.0, 10.0, 0.2),
    "mixture-d16": ("mixture", 16, 6.0, 20.0, 0.25),
    "uniform-d16": ("uniform", 16, 0.0, 8.0, 0.125),
    "vmf-d3": ("vmf", 3, 4.0, 10.0, 0.2),
}


def build_pi(cell: dict):
    """The data distribution of a cell."""
    d = int(cell["dim"])
    if cell["pi"] == "uniform":
        return Uniform(d)
    mu = np.zeros(d)
    mu[0] = 1.0
    if cell["pi"] == "vmf":
        return VonMisesFisher(mu, float(cell["kappa_pi"]))
    mus = Uniform(d).rvs(len(MIXTURE_WEIGHTS), rng=np.random.default_rng(MIXTURE_SEED))
    return VMFMixture(MIXTURE_WEIGHTS, mus, [float(cell["kappa_pi"])] * len(MIXTURE_WEIGHTS))


def _attrs(long_name: str, units: str, description: str) -> dict:
    return {"long_name": long_name, "units": units, "description": description}


class RateK(Study):
    name = "rate_k"
    claim = "C1"
    title = "Claim C1: the finite-k InfoNCE bias decays as c1/k"
    cell_dim = "setting"
    ademp = {
        "aim": "C1: gap_k = R_k - log k - CE = c1/k + O(1/k^2); rate 1/k, not 1/sqrt(k)",
        "data": "uniform, vMF and vMF-mixture pi on S^{d-1}; vMF positive kernel; phi = identity",
        "estimand": "gap_k on a geometric k grid; its log-log slope; the constant c1",
        "methods": "streaming InfoNCE estimator, common random numbers across k, control variates with exact "
                   "conditional means; WLS of log gap on log k and 1/k for k >= k_min; WLS of gap on 1/k, 1/k^2; "
                   "jackknife over independent blocks",
        "performance": "slope with 95% CI, p-values of slope = -1/2 and -1, c1 z-score, MCSE of every estimate",
    }
    params = {
        "settings": Param("settings", str, "uniform-d3,vmf-d8,mixture-d16", "comma-separated settings",
                          choices=tuple(SETTINGS), multi=True),
        "k_max": Param("k_max", int, 65536, "negatives per block (power of two); grid 1, 2, ..., k_max",
                       low=16, high=1 << 20, power_of_two=True, quick=4096),
        "n_blocks": Param("n_blocks", int, 64, "independent replicate blocks per setting", low=8, high=100000,
                          quick=32),
        "block_anchors": Param("block_anchors", int, 256, "anchors per block (sharing its negatives)",
                               low=8, high=1 << 20),
        "pilot_blocks": Param("pilot_blocks", int, 4, "pilot blocks for the control-variate coefficients",
                              low=1, high=64, quick=2),
        "n_mc": Param("n_mc", int, 1 << 18, "Monte Carlo size over x for constants without a 1-D reduction "
                      "(mixture pi, rotated kernels); their MCSE is reported", low=1024, high=1 << 24, quick=1 << 16),
        "k_min_factor": Param("k_min_factor", float, 16.0,
                              "fit k >= k_min_factor * max(E[Z2/Z^2], E[m1/Z])", low=0.0),
        "dim": Param("dim", int, None, "override the dimension d of every setting", low=2, high=4096),
        "tau": Param("tau", float, None, "override the temperature of every setting", low=0.005),
        "kappa_m": Param("kappa_m", float, None, "override the kernel concentration of every setting",
                         low=0.0, high=1e6),
        "kappa_pi": Param("kappa_pi", float, None, "override the concentration of pi (vMF and mixture settings)",
                          low=0.0, high=1e6),
    }

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

    def _estimator(self, cell, cfg) -> GapEstimator:
        return GapEstimator(build_pi(cell), VMFKernel(cell["kappa_m"]), cell["tau"], cfg["k_max"])

    def block_dims(self, cfg):
        names = ("gap_cv", "gap_plain", "gap_cv_var", "loss", "dgap", "dgap_cv")
        dims = {n: ("k",) for n in names}
        dims["ell_inf"] = ()
        return dims, {"k": k_grid(cfg["k_max"])}

    def prepare(self, cell, cfg, rng):
        est = self._estimator(cell, cfg)
        pi, kernel, tau = est.pi, est.kernel, est.tau
        coef = est.calibrate(cfg["block_anchors"], rng, n_blocks=cfg["pilot_blocks"])
        c1 = exact.bias_constant(pi, kernel, tau, n_mc=cfg["n_mc"])
        ce = exact.cross_entropy(pi, kernel, tau, n_mc=cfg["n_mc"])
        rho, mbar = exact.expansion_scales(pi, kernel, tau, n_mc=cfg["n_mc"])
        if isinstance(pi, Uniform):
            gex = exact.gap_exact(kernel, pi.dim, tau, est.grid)
        else:
            gex = np.full(est.grid.size, np.nan)
        c1v, c1s = (c1.value, c1.mcse) if isinstance(c1, exact.Estimate) else (c1, 0.0)
        cev, ces = (ce.value, ce.mcse) if isinstance(ce, exact.Estimate) else (ce, 0.0)
        return {"coef": coef, "c1_exact": np.array(c1v), "c1_exact_mcse": np.array(c1s), "ce_exact": np.array(cev),
                "ce_exact_mcse": np.array(ces), "rho": np.array(rho), "mbar": np.array(mbar), "gap_exact": gex}

    def generate(self, cell, cfg, prep, rng):
        return self._estimator(cell, cfg).block(cfg["block_anchors"], rng, prep["coef"])

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        k = raw["k"].values
        n_set = raw.sizes["setting"]
        ds = raw.copy()
        gap, gap_se = mean_mcse(raw["raw_gap_cv"].values, axis=1)
        plain, plain_se = mean_mcse(raw["raw_gap_plain"].values, axis=1)
        loss, loss_se = mean_mcse(raw["raw_loss"].values, axis=1)
        dg, dg_se = mean_mcse(raw["raw_dgap_cv"].values, axis=1)
        ce_est, ce_est_se = mean_mcse(raw["raw_ell_inf"].values, axis=1)
        fields = {n: np.full(n_set, np.nan) for n in (
            "slope", "slope_se", "slope_ci_low", "slope_ci_high", "slope_p_half", "slope_p_one",
            "slope_verdict_low", "slope_verdict_high", "curvature", "slope_se_wls", "slope_plain", "slope_plain_se",
            "slope_plain_ci_low", "slope_plain_ci_high", "c1_estimate", "c1_estimate_mcse", "c2_estimate",
            "c2_estimate_mcse", "c1_z", "k_min")}
        fit_gap = np.full((n_set, k.size), np.nan)
        resid_rate = np.full((n_set, k.size), np.nan)
        resid_c1 = np.full((n_set, k.size), np.nan)
        verdict = np.array(["fail"] * n_set, dtype=object)
        reasons = np.array([""] * n_set, dtype=object)
        for i in range(n_set):
            blocks = raw["raw_gap_cv"].values[i]
            blocks = blocks[np.all(np.isfinite(blocks), axis=1)]
            scale = max(float(raw["prep_rho"].values[i]), float(raw["prep_mbar"].values[i]))
            if not np.isfinite(scale):
                reasons[i] = "preparation failed (see cell_error)"
                verdict[i] = "error"
                continue
            if blocks.shape[0] < 3:
                reasons[i] = f"too few finished blocks ({blocks.shape[0]})"
                verdict[i] = "error" if str(raw["cell_error"].values[i]) else "fail"
                continue
            k_min = choose_k_min(k, scale, cfg["k_min_factor"])
            fields["k_min"][i] = k_min
            if np.sum(k >= k_min) < 4:
                reasons[i] = (f"k_max = {int(k[-1])} is too small: {int(np.sum(k >= k_min))} grid point(s) >= "
                              f"k_min = {k_min}, 4 needed; raise k_max")
                continue
            fit = fit_rate(k, blocks, k_min, with_inverse=True, level=0.95)
            plain_fit = fit_rate(k, blocks, k_min, with_inverse=False, level=0.95)
            curve = fit_inverse_powers(k, blocks, k_min, n_terms=2)
            lo, hi = fit.interval(1 - ALPHA) if np.isfinite(fit.slope) else (np.nan, np.nan)
            for name, value in (("slope", fit.slope), ("slope_se", fit.slope_se), ("slope_ci_low", fit.ci_low),
                                ("slope_ci_high", fit.ci_high), ("slope_p_half", fit.p_half),
                                ("slope_p_one", fit.p_one), ("slope_verdict_low", lo), ("slope_verdict_high", hi),
                                ("curvature", fit.curvature), ("slope_se_wls", fit.slope_se_wls),
                                ("slope_plain", plain_fit.slope), ("slope_plain_se", plain_fit.slope_se),
                                ("slope_plain_ci_low", plain_fit.ci_low), ("slope_plain_ci_high", plain_fit.ci_high),
                                ("c1_estimate", curve.coef[0]), ("c1_estimate_mcse", curve.se[0]),
                                ("c2_estimate", curve.coef[1]), ("c2_estimate_mcse", curve.se[1])):
                fields[name][i] = value
            fit_gap[i] = np.exp(fit.fitted)
            resid_rate[i] = fit.std_resid
            resid_c1[i] = curve.std_resid
            c1x, c1xs = float(raw["prep_c1_exact"].values[i]), float(raw["prep_c1_exact_mcse"].values[i])
            z = z_score(curve.coef[0], curve.se[0], c1x, c1xs)
            fields["c1_z"][i] = z
            zcrit = stats.norm.isf(ALPHA / 2)
            problems = []
            if not (lo <= -1.0 <= hi):
                problems.append(f"slope interval at level {1 - ALPHA:g} [{lo:.4f}, {hi:.4f}] excludes -1")
            if not (fit.p_half < ALPHA):
                problems.append(f"slope = -1/2 not rejected (p = {fit.p_half:.3g})")
            if not (abs(z) <= zcrit):
                problems.append(f"c1 z-score {z:+.2f} beyond +-{zcrit:.2f}")
            verdict[i] = "pass" if not problems else "fail"
            if str(raw["cell_error"].values[i]):
                verdict[i] = "error"
                problems.insert(0, f"{raw.sizes['block'] - blocks.shape[0]} block(s) failed (see cell_error); "
                                   "summaries use the finished blocks; run again to retry")
            reasons[i] = "; ".join(problems)
        S, K = ("setting",), ("setting", "k")
        a = _attrs
        new = {
            "gap": (K, gap, a("finite-k gap R_k - log k - CE", "nat",
                              "block mean of the control-variate estimator G_k (simkit.infonce)")),
            "gap_mcse": (K, gap_se, a("Monte Carlo standard error of gap", "nat", "sd over blocks / sqrt(n_blocks)")),
            "gap_plain": (K, plain, a("gap without control variates", "nat",
                                      "block mean of l_k - log k - l_inf (exact per-anchor limit subtracted only)")),
            "gap_plain_mcse": (K, plain_se, a("MCSE of gap_plain", "nat", "sd over blocks / sqrt(n_blocks)")),
            "gap_exact": (K, raw["prep_gap_exact"].values, a("exact gap", "nat",
                          "Laplace-transform formula (simkit.exact.gap_exact); uniform pi only, NaN otherwise")),
            "k_gap": (K, gap * k, a("k times gap", "nat", "approaches c1 as k grows")),
            "k_gap_mcse": (K, gap_se * k, a("MCSE of k_gap", "nat", "k * gap_mcse")),
            "loss": (K, loss, a("InfoNCE risk R_k", "nat", "block mean of l_k")),
            "loss_mcse": (K, loss_se, a("MCSE of loss", "nat", "sd over blocks / sqrt(n_blocks)")),
            "dgap": (K, dg, a("gap_k - gap_2k", "nat",
                              "estimated without Z: D_k - D_2k with an exactly centred control variate (k <= K/4)")),
            "dgap_mcse": (K, dg_se, a("MCSE of dgap", "nat", "sd over blocks / sqrt(n_blocks)")),
            "fit_gap": (K, fit_gap, a("fitted gap", "nat", "exp of the WLS fit of log gap on log k and 1/k")),
            "resid_rate": (K, resid_rate, a("standardised residual of the rate fit", "1",
                                            "(log gap - fit) / (gap_mcse / gap); only k >= k_min enter the fit")),
            "resid_c1": (K, resid_c1, a("standardised residual of the c1 fit", "1",
                                        "(gap - c1/k - c2/k^2) / gap_mcse; only k >= k_min enter the fit")),
            "ce_exact": (S, raw["prep_ce_exact"].values, a("exact cross-entropy CE(M, Q)", "nat",
                                                          "simkit.exact.cross_entropy")),
            "ce_exact_mcse": (S, raw["prep_ce_exact_mcse"].values, a("MCSE of ce_exact", "nat",
                                                                    "0 where exact (quadrature)")),
            "ce_estimate": (S, ce_est, a("Monte Carlo CE", "nat", "block mean of l_inf = -s(x,x+) + log Z(x)")),
            "ce_estimate_mcse": (S, ce_est_se, a("MCSE of ce_estimate", "nat", "sd over blocks / sqrt(n_blocks)")),
            "c1_exact": (S, raw["prep_c1_exact"].values, a("exact c1", "nat",
                         "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.bias_constant)")),
            "c1_exact_mcse": (S, raw["prep_c1_exact_mcse"].values, a("MCSE of c1_exact", "nat",
                                                                    "0 where exact; Monte Carlo over x otherwise")),
            "expansion_scale": (S, np.maximum(raw["prep_rho"].values, raw["prep_mbar"].values),
                                a("expansion scale", "1", "max(E[Z2/Z^2], E[m1/Z]); k_min = smallest grid k >= "
                                  "k_min_factor * scale")),
        }
        descr = {
            "slope": ("log-log slope of gap_k", "1", "WLS of log gap on log k and 1/k over k >= k_min"),
            "slope_se": ("jackknife standard error of slope", "1", "delete-one-block jackknife"),
            "slope_ci_low": ("95% interval for slope, lower", "1", "Student t, n_blocks - 1 df, jackknife SE"),
            "slope_ci_high": ("95% interval for slope, upper", "1", "Student t, n_blocks - 1 df, jackknife SE"),
            "slope_p_half": ("p-value of slope = -1/2", "1", "two-sided t test, jackknife SE"),
            "slope_p_one": ("p-value of slope = -1", "1", "two-sided t test, jackknife SE"),
            "slope_verdict_low": ("verdict interval for slope, lower", "1", f"level 1 - {ALPHA:g}"),
            "slope_verdict_high": ("verdict interval for slope, upper", "1", f"level 1 - {ALPHA:g}"),
            "curvature": ("coefficient of 1/k in the log fit", "1", "models the O(1/k^2) term of gap_k"),
            "slope_se_wls": ("naive WLS standard error of slope", "1",
                             "ignores the correlation across k from common random numbers; for comparison"),
            "slope_plain": ("plain log-log slope", "1", "WLS of log gap on log k only, k >= k_min"),
            "slope_plain_se": ("jackknife SE of slope_plain", "1", "delete-one-block jackknife"),
            "slope_plain_ci_low": ("95% interval for slope_plain, lower", "1", "Student t, jackknife SE"),
            "slope_plain_ci_high": ("95% interval for slope_plain, upper", "1", "Student t, jackknife SE"),
            "c1_estimate": ("estimated c1", "nat", "WLS of gap on 1/k and 1/k^2 over k >= k_min"),
            "c1_estimate_mcse": ("MCSE of c1_estimate", "nat", "delete-one-block jackknife"),
            "c2_estimate": ("estimated c2", "nat", "coefficient of 1/k^2"),
            "c2_estimate_mcse": ("MCSE of c2_estimate", "nat", "delete-one-block jackknife"),
            "c1_z": ("z-score of c1_estimate against c1_exact", "1",
                     "(c1_estimate - c1_exact) / sqrt(c1_estimate_mcse^2 + c1_exact_mcse^2)"),
            "k_min": ("smallest k in the fits", "1", "smallest grid k >= k_min_factor * expansion_scale"),
        }
        for name, (ln, units, desc) in descr.items():
            new[name] = (S, fields[name], a(ln, units, desc))
        new["verdict"] = (S, verdict.astype(str), a("verdict for C1", "1",
                          f"pass, fail or error (a task failed); pass when the level-{1 - ALPHA:g} slope interval contains -1, slope = -1/2 is "
                          f"rejected at {ALPHA:g}, and |c1_z| <= {stats.norm.isf(ALPHA / 2):.2f}"))
        new["verdict_reason"] = (S, reasons.astype(str), a("why a setting failed", "1", "empty when it passed"))
        for name, (dims, values, attrs) in new.items():
            ds[name] = (dims, values)
            ds[name].attrs = attrs
        ds["k"].attrs = a("number of negatives k", "1", "geometric grid 1, 2, 4, ..., k_max")
        ds["setting"].attrs = a("design setting", "1", "name of the setting in studies/rate_k.py SETTINGS")
        ds["dim"].attrs = a("ambient dimension d", "1", "points on S^{d-1} in R^d")
        ds["pi"].attrs = a("data distribution family", "1", "uniform, vmf (mean e_1) or mixture "
                           f"(weights {MIXTURE_WEIGHTS}, means from seed {MIXTURE_SEED})")
        ds["kappa_pi"].attrs = a("concentration of pi", "1", "vMF concentration of pi or of each mixture component")
        ds["kappa_m"].attrs = a("kernel concentration kappa_M", "1", "M(x, .) = vMF(x, kappa_M)")
        ds["tau"].attrs = a("temperature tau", "1", "score s(x, y) = x.y / tau")
        for v in [n for n in ds.data_vars if n.startswith("raw_")]:
            ds[v].attrs = a(f"per-block {v[4:]}", "nat", "raw replicate-block results (simkit.infonce.BLOCK_STATS)")
        for v in [n for n in ds.data_vars if n.startswith("prep_")]:
            ds[v].attrs = a(f"per-setting constant {v[5:]}", "1", "from the prepare stage (exact values, pilot)")
        ds.attrs["alpha"] = ALPHA
        return ds

    def report(self, ds, path):
        from simkit.report import rate_k_report
        rate_k_report(ds, path)

    def report_sections(self, doc, ds):
        from simkit.report import rate_k_sections
        rate_k_sections(doc, ds)

    def claim_rows(self, ds) -> list[dict]:
        """One C1 check: every setting's verdict (slope interval, -1/2 rejected, c1 z-score).

        The estimate is the slope of the setting farthest from -1 in standard errors.
        """
        slope, se = ds["slope"].values, ds["slope_se"].values
        worst = worst_slope(slope, se)
        verdicts = [str(v) for v in ds["verdict"].values]
        n = len(verdicts)
        overall = combine_verdicts(verdicts)
        detail = "; ".join(
            f"{s}: slope {ds['slope'].values[i]:.4f} ± {ds['slope_se'].values[i]:.4f}, c1 z {ds['c1_z'].values[i]:+.2f}"
            f" -> {verdicts[i]}" + (f" ({ds['verdict_reason'].values[i]})" if str(ds['verdict_reason'].values[i]) else "")
            for i, s in enumerate(ds["setting"].values))
        return [{
            "claim": "C1",
            "statistic": f"slope of log gap_k on log k (with 1/k term), {n} settings; -1 in the level-"
                         f"{1 - ALPHA:g} interval, -1/2 rejected, |c1 z| <= {stats.norm.isf(ALPHA / 2):.2f}",
            "estimate": float(slope[worst]),
            "estimate_mcse": float(se[worst]),
            "false_fail_rate": float(1.0 - (1.0 - 2 * ALPHA) ** n),
            "verdict": overall,
            "detail": detail,
        }]

    def summary_text(self, ds) -> str:
        lines = [f"{'setting':<14}{'slope':>9}{'95% CI':>20}{'p(-1/2)':>10}{'c1 est':>16}{'c1 exact':>18}{'z':>7}  verdict"]
        for i, s in enumerate(ds["setting"].values):
            lines.append(
                f"{s:<14}{ds['slope'].values[i]:>9.4f}   [{ds['slope_ci_low'].values[i]:.4f}, "
                f"{ds['slope_ci_high'].values[i]:.4f}]{ds['slope_p_half'].values[i]:>10.1e}"
                f"{ds['c1_estimate'].values[i]:>9.4f} ± {ds['c1_estimate_mcse'].values[i]:<5.4f}"
                f"{ds['c1_exact'].values[i]:>9.4f} ± {ds['c1_exact_mcse'].values[i]:<6.4f}"
                f"{ds['c1_z'].values[i]:>+7.2f}  {ds['verdict'].values[i]}")
        return "\n".join(lines)


STUDY = RateK()

if __name__ == "__main__":
    from simkit.cli import main
    sys.exit(main(["run", "rate_k", *sys.argv[1:]]))
