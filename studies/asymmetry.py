"""Claim C7: the 1/k rates of C1 and C2 hold for non-reversible, asymmetric positive kernels.

C1 (gap_k = c1/k + O(1/k^2)) and C2 (D_k = R_k - E CE(M_k, Q_k) = O(1/k)) re-tested at phi = identity
for kernels that are not pi-reversible (rotated vMF over uniform and vMF pi; spherical Brownian motion
over vMF pi; optionally the reversible vMF control), with rate_k's and search_ce's estimators and rate
rule (simkit.stats.analysis.rate_verdict, on |gap_k|: c1 < 0 is possible once M is asymmetric), and the
non-reversibility statistics against their exact values (simkit.exact.moments). ADEMP:
``Asymmetry.ademp``; in full: docs/design.md, "studies/asymmetry". Run: ``simkit run asymmetry``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from simkit import exact
from simkit.stats.analysis import (RATE_FIELDS, TRUTH_FIELDS_MAX_T, combine_verdicts, rate_verdict, setting_pvalues,
                             truth_rng, truth_verdict, worst_slope)
from simkit.exact.curve import gap_curve, second_order_constant
from simkit.distributions.designs import ASYMMETRY_SETTINGS, build_kernel, build_pi
from simkit.estimators.infonce import BLOCK_STATS, GapEstimator, k_grid
from simkit.exact.moments import asymmetry_exact
from simkit.runner import BLOCK_MCSE, Check, Param, Study, Var, block_means, cell_detail, estimate_table, estimate_vars
from simkit.estimators.search import N_TOP, SEARCH_STATS, SearchEstimator, search_constants

__all__ = ["STUDY", "ALPHA", "SETTINGS", "SCHEMA"]

#: false-failure rate of each per-setting check (the level of rate_k and search_ce)
ALPHA = 1e-3

#: the design catalogue (simkit.distributions.designs.ASYMMETRY_SETTINGS): name -> kernel family, its parameters,
#: pi, dimension, tau and the queries per C2 block
SETTINGS = ASYMMETRY_SETTINGS

#: smallest number of C2 queries per block in the quick design (see Asymmetry.unit_anchors)
QUICK_MIN_SEARCH_ANCHORS = 128

#: names of the per-block statistics: C1 (GapEstimator), C2 (SearchEstimator, its loss renamed)
C1_STATS = ("gap_cv", "gap_plain", "gap_cv_var", "loss", "dgap", "dgap_cv")
C2_STATS = ("d_cv", "d_rb", "d_plain", "d_cv_var", "pos_term", "snis_term", "loss_search", "ce", "top1", "recall")
ASYM_STATS = ("asym_cross", "asym_shift")


# ----------------------------------------------------------------------------------------------
# the dataset's schema

S, K = ("setting",), ("setting", "k")

#: the two rate analyses: curve, raw blocks, constant, its 1/k^2 partner, claim, whether the constant is tested
ANALYSES = (("gap", "raw_gap_cv", "c1", "c2", "c1", True), ("d", "raw_d_cv", "d1", "d2", "c2", False))

#: the curves over k with their MCSE: name -> (raw statistic, long name, description)
CURVES = {
    "gap": ("gap_cv", "finite-k gap R_k - log k - CE", "block mean of the control-variate estimator G_k "
            "(simkit.estimators.infonce)"),
    "gap_plain": ("gap_plain", "gap without control variates", "block mean of l_k - log k - l_inf"),
    "loss": ("loss", "InfoNCE risk R_k (C1 blocks)", "block mean of l_k"),
    "dgap": ("dgap_cv", "gap_k - gap_2k", "D_k - D_2k with its exactly centred control variate (k <= K/4)"),
    "d": ("d_cv", "D_k = R_k - E CE(M_k, Q_k)", "block mean of the control-variate estimator "
          "(simkit.estimators.search.SearchEstimator)"),
    "d_rb": ("d_rb", "D_k without control variates", "positive's score replaced by its exact conditional mean"),
    "d_plain": ("d_plain", "D_k, plain difference", "block mean of l_k - CE(M_k, Q_k)"),
    "pos_term": ("pos_term", "positive-weight term E log(1 + e^{s0}/S_k)", "first part of D_k"),
    "snis_term": ("snis_term", "self-normalisation term E[V_k/W_k] - E s(x, x+)", "second part of D_k"),
    "loss_search": ("loss_search", "InfoNCE risk R_k (C2 blocks)", "block mean of l_k"),
    "ce": ("ce", "E CE(M_k, Q_k)", "cross-entropy of ideal against softmax empirical retrieval"),
}

#: exact or predicted constants: name -> (long name, description)
EXACT = {
    "c1": ("exact c1, in nats", "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.bias_constant): quadrature where exact, "
           "Monte Carlo over x (the task's rng) with exact inner terms for the rotated kernel"),
    "ce": ("exact cross-entropy CE(M, Q), in nats", "simkit.exact.cross_entropy"),
    "c2": ("exact c2, in nats", "second-order constant of gap_k = c1/k + c2/k^2 + O(1/k^3) (simkit.exact.curve."
           "second_order_constant; docs/theory.md §8)"),
    "d1": ("predicted d1, in nats", "E_x[m1/Z] - E_x Cov_M(m, s) (simkit.estimators.search.search_constants)"),
    "pos": ("predicted positive-weight constant E_x[m1/Z], in nats", "k * pos_term -> pos"),
    "snis": ("predicted self-normalisation constant E_x Cov_M(m, s), in nats", "k * snis_term -> -snis"),
    "w2": ("importance-weight second moment w2 = E_x E_pi[m^2]", "expansion scale of V_k/W_k"),
}

_ASYM = {"asym_cross": ("E[x_1 x+_2 - x_2 x+_1]", "antisymmetric part of the cross-moment E[x x+^T] (coordinates "
                        "1, 2); 0 for a pi-reversible kernel"),
         "asym_shift": ("E[x+_1 - x_1]", "shift of the first coordinate's mean from x to x+; 0 when pi is invariant "
                        "for M")}

_RAW_DESCR = {**BLOCK_STATS, **SEARCH_STATS, "loss_search": SEARCH_STATS["loss"],
              "asym_cross": "mean of x_1 x+_2 - x_2 x+_1 over n_asym pairs",
              "asym_shift": "mean of x+_1 - x_1 over n_asym pairs"}


def _analysis_schema(var: str, const: str, const2: str, claim: str, test_const: bool) -> dict[str, Var]:
    p = f"{var}_"
    zdesc = (f"({const}_estimate - {const}_exact) / sqrt({const}_estimate_mcse^2 + {const}_exact_mcse^2)"
             + ("; compared with Student t on n_blocks - 1 df" if test_const else
                "; diagnostic, not part of the verdict (d1 is derived here)"))
    rule = (f"pass when the block means keep one sign for k >= k_min, the level-{1 - ALPHA:g} slope interval "
            f"contains -1 and slope = -1/2 is rejected at {ALPHA:g}"
            + (f", and |c1_z| is within the two-sided level-{ALPHA:g} Student t critical value on n_blocks - 1 df"
               if test_const else "") + " (simkit.stats.analysis.rate_verdict)")
    fields = {
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
        "sign": (f"sign of {var}_k in the fit range", "+1 or -1; 0 if the block means change sign for k >= k_min "
                 "(then no fit: the setting fails)"),
        "k_sign": (f"grid k from which the mean {var}_k keeps its sign", "diagnostic"),
    }
    return {
        **{p + f: Var(S, ln, "1", desc) for f, (ln, desc) in fields.items()},
        f"{const}_estimate": Var(S, f"estimated {const}, in nats", "1", f"WLS of {var}_k on 1/k and 1/k^2 over "
                                 "k >= k_min"),
        f"{const}_estimate_mcse": Var(S, f"MCSE of {const}_estimate, in nats", "1", "delete-one-block jackknife"),
        f"{const2}_estimate": Var(S, f"estimated {const2}, in nats", "1", "coefficient of 1/k^2"),
        f"{const2}_estimate_mcse": Var(S, f"MCSE of {const2}_estimate, in nats", "1", "delete-one-block jackknife"),
        f"{const}_z": Var(S, f"z-score of {const}_estimate", "1", zdesc),
        f"fit_{var}_abs": Var(K, f"fitted |{var}_k|, in nats", "1", "exp of the WLS fit of log|curve| on log k "
                              "and 1/k"),
        f"resid_{var}_rate": Var(K, "standardised residual of the rate fit", "1", "(log|curve| - fit) / (mcse / "
                                 "|curve|); only k >= k_min enter the fit"),
        f"resid_{const}": Var(K, f"standardised residual of the {const} fit", "1", f"({var}_k - {const}/k - "
                              f"{const2}/k^2) / mcse; only k >= k_min enter the fit"),
        f"verdict_{claim}": Var(S, f"verdict for the {claim.upper()} rate", "1", f"pass, fail or error; {rule}"),
        f"verdict_{claim}_reason": Var(S, f"why the {claim.upper()} check failed", "1", "empty when it passed"),
    }


#: every variable and coordinate of the dataset
SCHEMA = {
    **{f"raw_{n}": Var(("setting", "block", "k"), f"per-block {n}" + (
        "" if n in ("top1", "recall") else ", squared nats" if n.endswith("_var") else ", in nats"), "1",
        f"raw replicate-block results: {_RAW_DESCR[n]}") for n in (*C1_STATS, *C2_STATS)},
    **{f"raw_{n}": Var(("setting", "block"), f"per-block {n}" + (", in nats" if n == "ell_inf" else ""), "1",
                       f"raw replicate-block results: {_RAW_DESCR[n]}") for n in ("ell_inf", *ASYM_STATS)},
    **{f"prep_{c}_coef": Var(("setting", f"{c}_coef_dim0", f"{c}_coef_dim1"), f"{c.upper()} control-variate "
                             "coefficients", "1", "per k (rows) and control variate (columns), from the pilot blocks")
       for c in ("c1", "c2")},
    **{f"prep_{n}": Var(S, f"per-setting constant {n}", "1", "from the prepare stage (nats for c1, ce, d1, pos and "
                        "snis)") for n in ("rho", "mbar", *(f"{c}_exact{s}" for c in EXACT for s in ("", "_mcse")),
                                           *(f"{a}_exact" for a in ASYM_STATS))},
    "prep_gap_exact": Var(("setting", "gap_exact_dim0"), "exact gap on the k grid, in nats", "1", "prepare stage"),
    "prep_gap_exact_cov": Var(("setting", "gap_exact_cov_dim0", "gap_exact_cov_dim1"), "covariance of the Monte "
                              "Carlo error of the exact gap across k (nats squared)", "1", "zero where exact"),
    "gap_exact_mcse": Var(K, "MCSE of gap_exact, in nats", "1", "0 where exact"),
    "c2_t": Var(S, "standardised difference of c2_estimate from c2_exact", "1", "Student t on n_blocks - 1 df"),
    "curve_max_t": Var(S, "largest studentised deviation of the Monte Carlo gap curve from the exact curve", "1",
                       "simkit.stats.truth_tests.max_t_test over every k (with the exact curve's own variance where it is "
                       "Monte Carlo)"),
    "curve_p": Var(S, "p-value of curve_max_t", "1", "Efron bootstrap of the blocks (9999 resamples; the exact "
                   "curve's error drawn from its covariance where it is Monte Carlo; simkit.stats.analysis.truth_rng)"),
    "dgap_max_t": Var(S, "largest studentised deviation of the Z-free dgap_k = gap_k - gap_2k from its exact value",
                      "1", "per-block dgap_cv for every k <= K/4 (simkit.stats.truth_tests.dgap_test, max-t)"),
    "dgap_p": Var(S, "p-value of dgap_max_t", "1", "as curve_p"),
    **{k: v for a in ANALYSES for k, v in _analysis_schema(a[0], *a[2:]).items()},
    "verdict": Var(S, "verdict for C7 in this setting", "1",
                   "pass when both verdict_c1 and verdict_c2 pass; error if a task failed"),
    **{k: v for n, (_, ln, desc) in CURVES.items() for k, v in estimate_vars(n, K, ln, desc, nats=True).items()},
    "k_gap": Var(K, "k times gap, in nats", "1", "approaches c1 as k grows"),
    "k_gap_mcse": Var(K, "MCSE of k_gap, in nats", "1", "k * gap_mcse"),
    "k_d": Var(K, "k times D_k, in nats", "1", "approaches d1 as k grows"),
    "k_d_mcse": Var(K, "MCSE of k_d, in nats", "1", "k * d_mcse"),
    **{n: Var(K, ln, "1", "first min(rank_anchors, queries) queries of each block (simkit.estimators.search); NaN where "
              f"k < {N_TOP} for recall") for n, ln in (("top1", "top-1 agreement of Q_k and M_k"),
                                                       ("recall", f"recall@{N_TOP} of Q_k against M_k"))},
    **{f"{n}_mcse": Var(K, f"MCSE of {n}", "1", BLOCK_MCSE) for n in ("top1", "recall")},
    "gap_exact": Var(K, "exact gap, in nats", "1", "simkit.exact.curve.gap_curve (Laplace-transform integral; exact "
                     "quadrature, or Monte Carlo over x with exact inner integrals for the rotated kernel over a vMF "
                     "pi: gap_exact_mcse)"),
    "ce_estimate": Var(S, "Monte Carlo CE, in nats", "1", "block mean of l_inf = -s(x,x+) + log Z(x)"),
    "ce_estimate_mcse": Var(S, "MCSE of ce_estimate, in nats", "1", BLOCK_MCSE),
    **{f"{n}_exact": Var(S, ln, "1", desc) for n, (ln, desc) in EXACT.items()},
    **{f"{n}_exact_mcse": Var(S, f"MCSE of {n}_exact" + ("" if n == "w2" else ", in nats"), "1", "0 where exact")
       for n in EXACT},
    "c1_scale": Var(S, "expansion scale of gap_k", "1", "max(E[Z2/Z^2], E[m1/Z])"),
    "c2_scale": Var(S, "expansion scale of D_k", "1", "max(E[Z2/Z^2], E[m1/Z], w2)"),
    **{n: Var(S, ln, "1", f"Monte Carlo over n_asym pairs per block; {desc}") for n, (ln, desc) in _ASYM.items()},
    **{f"{n}_mcse": Var(S, f"MCSE of {n}", "1", BLOCK_MCSE) for n in _ASYM},
    **{f"{n}_exact": Var(S, f"exact {ln}", "1", "from E[x+ | x] = B x and the moments of pi")
       for n, (ln, _) in _ASYM.items()},
    **{f"{n}_z": Var(S, f"z-score of {n} against its exact value", "1", "(estimate - exact) / MCSE; diagnostic of "
                     "the sampler") for n in _ASYM},
    "k": Var(("k",), "number of negatives / database size k", "1", "geometric grid 1, 2, 4, ..., k_max"),
    "setting": Var(S, "design setting", "1", "name of the setting in simkit.distributions.designs.ASYMMETRY_SETTINGS"),
    "kernel": Var(S, "positive kernel family", "1", "rotated (vMF(Rx, kappa_M)), brownian (heat kernel, time t) "
                  "or vmf (vMF(x, kappa_M), the reversible control)"),
    "angle": Var(S, "rotation angle of R", "rad", "R rotates the (e_1, e_2) plane; NaN for other kernels"),
    "kappa_m": Var(S, "kernel concentration kappa_M", "1", "rotated and vMF kernels; NaN for the Brownian kernel"),
    "t": Var(S, "Brownian diffusion time t", "1", "generator Laplacian/2; NaN for the vMF kernels"),
    "pi": Var(S, "data distribution family", "1", "uniform or vmf (mean e_1); simkit.distributions.designs.build_pi"),
    "dim": Var(S, "ambient dimension d", "1", "points on S^{d-1} in R^d"),
    "kappa_pi": Var(S, "concentration of pi", "1", "vMF concentration of pi (0 for uniform)"),
    "tau": Var(S, "temperature tau", "1", "score s(x, y) = x.y / tau"),
    "search_anchors": Var(S, "queries per C2 block", "1", "sharing one database of k_max points"),
}


# ----------------------------------------------------------------------------------------------
# the checks (claim rows)

def _rate_check(var: str, claim: str, const: str):
    """The C7 check of one rate over every setting; its estimate is the slope farthest from -1 in SEs."""
    def evaluate(ds) -> dict:
        slope, se = ds[f"{var}_slope"].values, ds[f"{var}_slope_se"].values
        verdicts = [str(v) for v in ds[f"verdict_{claim}"].values]
        v = {n: ds[f"{const}_{n}"].values for n in ("estimate", "estimate_mcse", "exact", "exact_mcse")}
        texts = [f"slope {slope[i]:.4f} ± {se[i]:.4f}, {const} {v['estimate'][i]:.3f} ± {v['estimate_mcse'][i]:.3f} "
                 f"(exact {v['exact'][i]:.3f}" + (f" ± {v['exact_mcse'][i]:.3f}" if v["exact_mcse"][i] > 0 else "")
                 + ")" for i in range(slope.size)]
        detail = cell_detail(ds["setting"].values, texts, verdicts, ds[f"verdict_{claim}_reason"].values)
        worst = worst_slope(slope, se)
        return {"estimate": slope[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(verdicts),
                "detail": detail}
    return evaluate


C1_CHECK = Check(
    claim="C7",
    statistic=lambda ds: (f"C1 rate for non-reversible kernels: slope of log|gap_k| on log k (with 1/k term), "
                          f"{ds.sizes['setting']} settings; one sign for k >= k_min, -1 in the level-{1 - ALPHA:g} "
                          f"interval, -1/2 rejected, |c1 z| and |c2 t| <= {stats.t.isf(ALPHA / 2, ds.sizes['block'] - 1):.2f} (Student t, "
                          f"{ds.sizes['block'] - 1} df), MC curve and Z-free dgap against the exact curve at every k "
                          f"(max |t|, bootstrap reference)"),
    evaluate=_rate_check("gap", "c1", "c1"),
    false_fail_rate=lambda ds: 1.0 - (1.0 - 5 * ALPHA) ** ds.sizes["setting"],
    # the five null tests per setting behind the 5 * ALPHA
    pvalues=lambda ds: setting_pvalues(ds, ALPHA, {"slope": ("p", "gap_slope_p_one"), "curve": ("p", "curve_p"),
                                                   "dgap": ("p", "dgap_p"), "c1": ("t", "c1_z"), "c2": ("t", "c2_t")}),
)
C2_CHECK = Check(
    claim="C7",
    statistic=lambda ds: (f"C2 rate for non-reversible kernels: slope of log|D_k| on log k (with 1/k term), D_k = "
                          f"R_k - E CE(M_k, Q_k), {ds.sizes['setting']} settings; one sign for k >= k_min, -1 in the "
                          f"level-{1 - ALPHA:g} interval, -1/2 rejected"),
    evaluate=_rate_check("d", "c2", "d1"),
    false_fail_rate=lambda ds: 1.0 - (1.0 - ALPHA) ** ds.sizes["setting"],
    pvalues=lambda ds: setting_pvalues(ds, ALPHA, {"slope": ("p", "d_slope_p_one")}),
)


# ----------------------------------------------------------------------------------------------
# the study

class Asymmetry(Study):
    name = "asymmetry"
    claim = "C7"
    title = "Claim C7: the 1/k rates of C1 and C2 hold for non-reversible positive kernels"
    cell_dim = "setting"
    schema = SCHEMA
    checks = (C1_CHECK, C2_CHECK)
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
        # quick: many small blocks, so that the block means are near-Gaussian for the t references (docs/evidence.md)
        "n_blocks": Param("n_blocks", int, 64, "independent replicate blocks per setting", low=8, high=100000,
                          quick=48),
        "block_anchors": Param("block_anchors", int, 256, "InfoNCE anchors per block (C1, sharing its negatives)",
                               low=8, high=1 << 20, quick=128),
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

    @staticmethod
    def unit_anchors(name: str, cfg: dict) -> int:
        """Queries per C2 block; the quick design uses at least QUICK_MIN_SEARCH_ANCHORS, for a C2 slope SE
        small enough to reject slope = -1/2 (docs/evidence.md, asymmetry, "Design of the quick run")."""
        base = int(cfg["search_anchors"] or SETTINGS[name]["search_anchors"])
        return max(base, QUICK_MIN_SEARCH_ANCHORS) if cfg.get("quick") and not cfg["search_anchors"] else base

    def check_config(self, cfg):
        names = cfg["settings"].split(",")
        anchors = [self.unit_anchors(n, cfg) for n in names]
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
        cell["search_anchors"] = self.unit_anchors(name, cfg)
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
        r_c1, r_c2, r_const = rng.spawn(3)  # pilot C1, pilot C2, Monte Carlo constants
        gest, sest = self._estimators(cell, cfg)
        pi, kernel, tau = gest.pi, gest.kernel, gest.tau
        out = {"c1_coef": gest.calibrate(cfg["block_anchors"], r_c1, n_blocks=cfg["pilot_blocks"]),
               "c2_coef": sest.calibrate(cell["search_anchors"], r_c2, n_blocks=cfg["pilot_blocks"])}
        c1 = exact.bias_constant(pi, kernel, tau, n_mc=cfg["n_mc"], rng=r_const)
        ce = exact.cross_entropy(pi, kernel, tau, n_mc=cfg["n_mc"], rng=r_const)
        rho, mbar = exact.expansion_scales(pi, kernel, tau, n_mc=cfg["n_mc"], rng=r_const)
        for name, v in (("c1", c1), ("ce", ce)):
            val, se = (v.value, v.mcse) if isinstance(v, exact.Estimate) else (v, 0.0)
            out[f"{name}_exact"], out[f"{name}_exact_mcse"] = np.array(val), np.array(se)
        out["rho"], out["mbar"] = np.array(rho), np.array(mbar)
        for name, (v, se) in search_constants(pi, kernel, tau, n_mc=cfg["n_mc"], rng=r_const).items():
            out[f"{name}_exact"], out[f"{name}_exact_mcse"] = np.array(v), np.array(se)
        # the exact curve and c2: independent of the control variates' constants
        curve = gap_curve(pi, kernel, tau, gest.grid, rng=r_const, n_cv=cfg["n_mc"])
        c2 = second_order_constant(pi, kernel, tau, rng=r_const, n_mc=cfg["n_mc"])
        out["gap_exact"] = curve.gap
        out["gap_exact_cov"] = curve.gap_cov if curve.gap_cov is not None else np.zeros((gest.grid.size,) * 2)
        out["c2_exact"], out["c2_exact_mcse"] = ((c2.value, c2.mcse) if isinstance(c2, exact.Estimate) else (c2, 0.0))
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

    def summarise(self, raw, cfg) -> dict:
        k = raw["k"].values
        out = block_means(raw, {**{n: c[0] for n, c in CURVES.items()}, "top1": "top1", "recall": "recall",
                                **{n: n for n in ASYM_STATS}, "ce_estimate": "ell_inf"})
        for name in ASYM_STATS:
            out[f"{name}_exact"] = raw[f"prep_{name}_exact"].values
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"{name}_z"] = (out[name] - out[f"{name}_exact"]) / out[f"{name}_mcse"]
        for name, var in (("k_gap", "gap"), ("k_d", "d")):
            out[name], out[f"{name}_mcse"] = out[var] * k, out[f"{var}_mcse"] * k
        for name in ("gap_exact", *(f"{c}_exact{s}" for c in EXACT for s in ("", "_mcse"))):
            out[name] = raw[f"prep_{name}"].values
        out["c1_scale"] = np.maximum(raw["prep_rho"].values, raw["prep_mbar"].values)
        out["c2_scale"] = np.maximum(out["c1_scale"], raw["prep_w2_exact"].values)
        failed = [bool(str(e)) for e in raw["cell_error"].values]
        for (var, raw_name, const, const2, claim, test_const), scale in zip(ANALYSES, (out["c1_scale"],
                                                                                       out["c2_scale"])):
            rows = [rate_verdict(k, raw[raw_name].values[i], float(scale[i]), cfg["k_min_factor"],
                                 float(out[f"{const}_exact"][i]), float(out[f"{const}_exact_mcse"][i]), alpha=ALPHA,
                                 test_constant=test_const, failed_blocks=failed[i]) for i in range(len(failed))]
            names = {"const_estimate": f"{const}_estimate", "const_estimate_mcse": f"{const}_estimate_mcse",
                     "const2_estimate": f"{const2}_estimate", "const2_estimate_mcse": f"{const2}_estimate_mcse",
                     "const_z": f"{const}_z", "fit_abs": f"fit_{var}_abs", "resid_rate": f"resid_{var}_rate",
                     "resid_const": f"resid_{const}", "verdict": f"verdict_{claim}",
                     "reason": f"verdict_{claim}_reason"}
            for field in (*RATE_FIELDS, "fit_abs", "resid_rate", "resid_const", "verdict", "reason"):
                out[names.get(field, f"{var}_{field}")] = [r[field] for r in rows]
        self._truth(raw, k, out, cfg["seed"])
        out["verdict"] = [combine_verdicts(v) for v in zip(out["verdict_c1"], out["verdict_c2"])]
        return out

    @staticmethod
    def _truth(raw, k, out, seed) -> None:
        """C1 against the exact curve, the exact dgap and c2 (simkit.stats.analysis.truth_verdict), into verdict_c1."""
        cov = raw["prep_gap_exact_cov"].values
        out["gap_exact_mcse"] = np.sqrt(np.clip(np.diagonal(cov, axis1=1, axis2=2), 0.0, None))
        for name in TRUTH_FIELDS_MAX_T:
            out[name] = np.full(len(out["verdict_c1"]), np.nan)
        for i in range(len(out["verdict_c1"])):
            fields, problems = truth_verdict(
                k, raw["raw_gap_cv"].values[i], raw["raw_dgap_cv"].values[i], out["gap_exact"][i], cov[i],
                (out["c2_estimate"][i], out["c2_estimate_mcse"][i]), (out["c2_exact"][i], out["c2_exact_mcse"][i]),
                alpha=ALPHA, reference="max-t", rng=truth_rng(seed, str(raw["setting"].values[i])))  # as rate_k
            for name, v in fields.items():
                out[name][i] = v
            if out["verdict_c1"][i] != "error" and np.isfinite(out["gap_slope"][i]) and problems:
                out["verdict_c1"][i] = "fail"
                out["verdict_c1_reason"][i] = "; ".join(p for p in (out["verdict_c1_reason"][i], *problems) if p)

    def attrs(self, cfg):
        return {"alpha": ALPHA, "n_top": N_TOP}

    def summary_text(self, ds) -> str:
        rates = estimate_table(ds, "setting", {"gap_slope": "C1 slope", "c1_estimate": "c1", "c1_exact": "c1 exact",
                                               "c1_z": "z", "d_slope": "C2 slope", "d1_estimate": "d1",
                                               "d1_exact": "d1 pred.", "verdict": "verdict"}, fmt=".4g")
        asym = estimate_table(ds, "setting", {"asym_cross": "E[x1 x+2 - x2 x+1]", "asym_cross_exact": "exact",
                                              "asym_shift": "E[x+1 - x1]", "asym_shift_exact": "exact"}, fmt="+.4f")
        return "\n".join([rates, "", asym, "", super().summary_text(ds)])


STUDY = Asymmetry()
