"""Claims C3, C5 (gap side) and C6: the generalisation gap of a trained embedding, over n, k, tau and d.

For ERM embeddings phi_hat (L-BFGS-B) under pi uniform on S^2 and vMF positives, four sweeps (n, k, tau,
d, each with replicate training sets sharing random numbers across levels) estimate E[G],
G = R_k(phi_hat) - R_hat_{n,k}(phi_hat), and the excess E, with R_k(phi_hat) paired with phi = identity
(exact) and an exactly zero-mean control variate. Exploratory checks: C3 n-slope <= -1/2, no growth in
k at large k; C5 slope in log tau < 0; C6 no trend in log2 d.

Pre-registered part (protocols/generalisation.md): four more k sweeps judged by one one-sided
non-inferiority test of H0 "E[G] grows by >= DELTA_K per doubling of k" (simkit.stats.trend.non_inferiority):
kprim (C3, primary), kctl (the POSITIVE CONTROL, simkit.exact.bounds.control_tau, which the rule must flag),
krot and kbrown (C3 without symmetry, reported as C7 checks); beside every linear point a Theorem-1-type
bound (simkit.exact.bounds; docs/theory.md section 13) and the check E[G] + z MCSE <= 2 Rad_n bound.
The ADEMP statement is the class attribute ``Generalisation.ademp`` (stored in the dataset); in full:
docs/design.md, "studies/generalisation".

Run it: ``simkit run generalisation`` (or ``python -m simkit run generalisation``).
"""

from __future__ import annotations

import json
import math

import numpy as np
import xarray as xr
from numpy.typing import NDArray
from scipy import stats

from simkit import Uniform, VMFKernel, exact
from simkit.stats.analysis import mean_mcse
from simkit.stats.trend import equivalence_test, log_sd_slope, non_inferiority, one_sided_rate, trend_test
from simkit.exact.bounds import compare_to_bound, control_tau, linear_class_bound
from simkit.distributions.designs import ASYMMETRY_SETTINGS, build_kernel, build_pi
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.lifted import LIFT_SEED, FourierEmbedding, LiftedRisk
from simkit.estimators.population import generalisation, paired_risk_difference
from simkit.claims.protocol import protocol_attrs
from simkit.runner import Check, Param, Study, Var, block_of, common_seeds, level_grid
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train

__all__ = ["STUDY", "SCHEMA", "CHECKS", "NI_CHECKS", "ALPHA", "POWER", "EQUIV_MARGIN", "SWEEPS", "NI_SWEEPS", "DELTA_K",
           "ISO_MIN", "ETA", "P_DIM", "PROTOCOL_PATH", "SEED_SPLIT"]

#: level of every check (one-sided tests at ALPHA; the two-sided C6 test at ALPHA in total)
ALPHA = 0.01
#: detection probability at which each check's power is stated
POWER = 0.9
#: equivalence margin of the supplementary C6 check: |trend of E[G]| per doubling of d, relative to E[G].
#: Bounds with an explicit sqrt(d) grow by 41% per doubling, log d by 1/log2(d) (14-50% here).
EQUIV_MARGIN = 0.10
#: the exploratory sweeps (the study's original design; their checks are not pre-registered)
OLD_SWEEPS = ("n", "k", "tau", "d")
#: the pre-registered k sweeps of protocols/generalisation.md: the primary C3 replicate, the positive
#: control (temperature tau_k = tau sqrt(k_trend_min / k)), and C3 under the rotated vMF and Brownian kernels (C7)
NI_SWEEPS = ("kprim", "kctl", "krot", "kbrown")
SWEEPS = OLD_SWEEPS + NI_SWEEPS
PROTOCOL_PATH = "protocols/generalisation.md"
#: non-inferiority margin of the pre-registered k rule: growth of E[G] per doubling of k (a sqrt(k)
#: complexity term is +41.4%; a term growing like log k alone is +1/log2(k) >= +10% for k <= 1024)
DELTA_K = 0.10
#: the linear class of the bound: Theta_s = {W: ||W||_op = 1, sigma_min(W) >= ISO_MIN sigma_max(W)}
ISO_MIN = 0.2
#: the fixed reference embedding of the rotated-kernel sweep: W_ref = diag(a, a, 1) (the rotation acts in the
#: (e_1, e_2) plane; by the symmetry of vMF(Rx, kappa) about e_3 the population ERM has W^T W = diag(b, b, c)).
#: a = 0.35 is sigma_min/sigma_max of one ERM on n = 8192 tuples, k = 64, tau = 0.1 (pilot seed 1, before the
#: protocol). Any fixed reference gives an exactly zero-mean control; this one, near phi_hat, makes the paired
#: R_k difference 3-4x less noisy than the identity (pilot, 4 blocks: evaluation MCSE 0.004-0.02 nats against
#: 0.015-0.054 with the identity)
ROT_REF_SCALE = 0.35
#: level of the McDiarmid (sample-variability) term of the bound
ETA = 0.05
#: one-sided normal quantile of the MCSE upper limit in the bound check (level ALPHA)
_Z_UPPER = float(stats.norm.isf(0.01))
#: kernel settings of the NI sweeps: (pi, kappa_pi, kernel, kappa_M, angle, t, tau or None = cfg tau)
_ROT, _BROWN = ASYMMETRY_SETTINGS["rot-uniform-d3"], ASYMMETRY_SETTINGS["brown-vmf-d3"]
NI_SETTINGS = {
    "kprim": ("uniform", 0.0, "vmf", None, math.nan, math.nan, None),
    "kctl": ("uniform", 0.0, "vmf", None, math.nan, math.nan, None),
    # the rotation angle of the catalogue's rot-vmf-d8 setting (pi/3) over rot-uniform-d3's uniform pi, kappa_M and
    # tau: at rot-uniform-d3's 2.6 rad the symmetric part of R has eigenvalues cos 2.6 < 0 in the rotated plane,
    # which the Gram-matrix scores of the linear class cannot represent, and ERM drives W singular (measured in
    # the pilot: phi_hat undefined)
    "krot": (_ROT["pi"], _ROT["kappa_pi"], "rotated", _ROT["kappa_m"], ASYMMETRY_SETTINGS["rot-vmf-d8"]["angle"],
             math.nan, _ROT["tau"]),
    "kbrown": (_BROWN["pi"], _BROWN["kappa_pi"], "brownian", math.nan, math.nan, _BROWN["t"], _BROWN["tau"]),
}
P_DIM = 3  # data on S^2: quadrature gives Z to ~1e-9 (simkit.exact.quadrature)
#: caps on embedded points (and on points x d values, Fourier family) per evaluation chunk: bounds memory
_CHUNK_POINTS = 1 << 18
_CHUNK_VALUES = 1 << 22
#: points x ~ pi (and as many y) for the effective-dimension and score-change diagnostics of the Fourier family
_DIAG_POINTS = 1024


#: the seed split, recorded in the dataset's ``seed_split`` attribute
SEED_SPLIT = ("per (sweep, block): SeedSequence(seed, spawn_key=(*cell_key('generalisation', {'sweep': s}), 1, "
              "block)).spawn(4) -> sample, init, restarts, evaluation (evaluation.spawn(3) -> paired R_k, CE, "
              "diagnostics); shared by the levels of the sweep")


# ----------------------------------------------------------------------------------------------
# the dataset

P, PB = ("point",), ("point", "block")
SE = "sd over blocks / sqrt(blocks)"

#: per-block scalars returned by generate (NaN where not applicable): name -> (long_name, in nats?, description)
QUANTITIES = {
    "gap": ("E[G], plain", True, "mean over blocks of R_k(phi_hat) - R_hat(phi_hat), R_k paired with the identity"),
    "gap_cv": ("E[G], control variate", True, "mean over blocks of G + R_hat(id) - R_k(id) (exactly zero-mean "
                                              "control); the main estimate of E[G]"),
    "gap_eval_mcse": ("evaluation MCSE of G per block", True, "MCSE of the paired R_k difference within a block"),
    "risk_excess": ("R_k(phi_hat) - R_k(identity)", True, "paired on fresh tuples: approximation + estimation error "
                    "(rotated kernel: against the fixed reference W_ref = diag(a, a, 1), a = ROT_REF_SCALE)"),
    "train_risk": ("R_hat(phi_hat)", True, "empirical risk of the trained embedding"),
    "train_risk_id": ("R_hat(identity)", True, "empirical risk of phi = identity on the same sample (rotated kernel: "
                      "of the fixed reference W_ref)"),
    "n_eval": ("evaluation tuples", False, "fresh tuples of the paired R_k estimate"),
    "excess": ("E[E], plain", True, "CE(phi_hat) - (R_hat(phi_hat) - log k)"),
    "excess_cv": ("E[E], control variate", True, "E = CE(phi_hat) - (R_hat - log k) plus the same control"),
    "excess_eval_mcse": ("evaluation MCSE of E per block", True, "MCSE of the CE estimate"),
    "ce_excess": ("CE(phi_hat) - CE(identity)", True, "quadrature CE with the identity control variate"),
    "gap_unpaired": ("E[G], unpaired population estimate", True,
                     "simkit.estimators.population.generalisation's G (R_k on its own anchors, identity-CE control)"),
    "gap_unpaired_mcse": ("MCSE of the unpaired G", True, "from simkit.estimators.population"),
    "converged": ("fraction of trainings converged", False, "L-BFGS-B success flag of the best start"),
    "n_converged": ("starts converged", False, "of the restarts"),
    "iterations": ("L-BFGS-B iterations", False, "of the best start"),
    "grad_norm": ("final gradient norm", False, "max abs component, best start"),
    "restart_spread": ("spread of final risks over starts", True, "max - min of R_hat over the restarts"),
    "lipschitz": ("parameter-Lipschitz constant of phi", False,
                  "sup over x and W of ||d phi_W(x) / d W||_2 (Fourier family: exact, 1/sqrt(3) for every d)"),
    "eff_dim": ("effective dimension of phi_hat(x)", False,
                "participation ratio (sum lambda)^2 / sum lambda^2 of the covariance of phi_hat(x), x ~ pi"),
    "score_change": ("score change against the largest d", False,
                     f"mean over {_DIAG_POINTS} pairs x, y ~ pi of |phi_hat(x).phi_hat(y) - phi_ref(x).phi_ref(y)| / "
                     "tau, phi_ref the largest d of the sweep with the same W: how much d changes the function at "
                     "fixed parameters"),
    "isometry": ("sigma_min / sigma_max of W", False, "linear family: 1 for an isometry (the population optimum)"),
}
BLOCK_VARS = tuple(QUANTITIES)
#: block means reported with their MCSE
SUMMARY_VARS = ("gap_cv", "gap", "gap_unpaired", "excess_cv", "excess", "risk_excess", "ce_excess", "gap_eval_mcse",
                "converged", "restart_spread", "iterations", "isometry", "lipschitz", "eff_dim", "score_change")
#: exact constants of the prepare stage
PREP_VARS = {"risk_id": ("R_k(identity)", "log k + CE(id) + gap_k(id), exact"),
             "ce_id": ("CE(identity)", "simkit.exact.cross_entropy (exact for uniform pi)"),
             "gap_id": ("gap_k(identity)", "R_k - log k - CE for phi = identity (simkit.exact.gap_exact)"),
             "entropy": ("H = -I(x; x+)", "minimum of CE over all Q (simkit.exact.mutual_information; NaN unless pi "
                         "is uniform and the kernel isotropic)"),
             "c1_id": ("C1 constant c1 of the identity", "c1 = E[m1/Z - (Z2/Z^2 - 1)/2] for phi = identity at the "
                       "point's tau (simkit.exact.bias_constant; Monte Carlo over x for the rotated kernel)")}


def _v(dims, long_name, description, nats=False):
    return Var(dims, f"{long_name}, in nats" if nats else long_name, "1", description)


def _sweep_schema(s: str) -> dict:
    """The fit and verdict variables ``<s>_<name>`` of sweep ``s`` (scalars, ``fit`` per point)."""
    out = {}
    if s in ("n", "tau"):
        what = "log E[G] on log n" if s == "n" else "log E[G] on log tau"
        bound = -0.5 if s == "n" else 0.0
        out.update({
            "slope": _v((), f"slope of {what}", "WLS on the block means, all levels"),
            "slope_se": _v((), "SE of slope", "delete-one-block jackknife"),
            "slope_t": _v((), f"t statistic against {bound:g}", "(slope - bound) / SE"),
            "slope_p": _v((), "one-sided p-value", "H0: slope <= -1/2" if s == "n" else
                          "H0: slope >= 0 (G does not grow as tau falls)"),
            "slope_detect": _v((), f"slope change detected with probability {POWER:g}",
                               "(t_(1-alpha) + t_power) SE, from the bound towards H1"),
            "fit": _v(P, "fitted E[G]", f"exp of the log-log WLS fit (NaN outside the {s} sweep)", nats=True),
        })
        if s == "n":
            out["sd_slope"] = _v((), "slope of log sd(G) on log n",
                                 "OLS on the block-level sd; sampling variability is O(n^-1/2) (NaN: < 3 blocks)")
            out["sd_slope_se"] = _v((), "SE of sd_slope", "delete-one-block jackknife")
        else:
            out["false_fail"] = _v((), "plug-in false-failure rate",
                                   "P(the test fails to reject) if the true slope equals the estimate")
    else:
        one = s == "k"
        out.update({
            "trend": _v((), f"slope of E[G] in log2 {s}", "per doubling; mean of per-block OLS slopes"
                        + (" over k >= k_trend_min" if one else ""), nats=True),
            "trend_se": _v((), "SE of trend", "sd of the per-block slopes / sqrt(blocks)", nats=True),
            "trend_t": _v((), "t statistic", "trend / SE"),
            "trend_p": _v((), "p-value", "one-sided (H0: trend <= 0)" if one else "two-sided (H0: trend = 0)"),
            "trend_detect": _v((), f"trend detected with probability {POWER:g}",
                               "(t_(1-alpha) + t_power) SE" if one else "(t_(1-alpha/2) + t_power) SE", nats=True),
            "trend_level": _v((), "mean E[G] over the trend levels", "for relative statements", nats=True),
            "growth_p": _v((), "one-sided p-value of growth", "H0: trend <= 0"),
            "rel_trend": _v((), "trend relative to E[G]", "trend / trend_level: fraction of E[G] per doubling"),
            "rel_trend_se": _v((), "SE of rel_trend", "trend_se / trend_level (the level's own MCSE is ignored)"),
        })
        if s == "d":
            out.update({
                "equiv_margin": _v((), "equivalence margin", f"{EQUIV_MARGIN:g} x E[G] per doubling of d", nats=True),
                "equiv_p": _v((), "p-value of the equivalence test",
                              "max of the two one-sided p-values (TOST); H0: |trend| >= margin"),
                "equiv_verdict": _v((), "equivalence verdict", f"pass when both one-sided tests reject at {ALPHA:g}"),
                "equiv_power0": _v((), "probability of passing the equivalence test at trend 0",
                                   "t approximation with the estimated SE"),
            })
    out["verdict"] = _v((), f"verdict of the {s}-sweep check", "pass, fail or error (a task failed)")
    out["verdict_reason"] = _v((), "why the check did not pass", "empty when it passed")
    return {f"{s}_{name}": var for name, var in out.items()}


_NI_WHAT = {"kprim": "primary C3 (vMF kernel, fresh replicate of the k sweep)",
            "kctl": "positive control (linear class at tau sqrt(k_trend_min/k): complexity term grows like sqrt k)",
            "krot": "C7: C3 under the rotated vMF kernel", "kbrown": "C7: C3 under the Brownian kernel"}


def _ni_schema(s: str) -> dict:
    """The pre-registered non-inferiority variables ``<s>_<name>`` of NI sweep ``s`` (scalars)."""
    out = {
        "b": _v((), "slope b of log2 E[G] on log2 k", "OLS on the block-mean curve over k >= k_trend_min"),
        "b_se": _v((), "jackknife SE of b", "delete-one-block jackknife"),
        "growth": _v((), "growth of E[G] per doubling of k", "2^b - 1"),
        "growth_se": _v((), "SE of growth", "delta method: ln 2 * 2^b * b_se"),
        "ni_t": _v((), "non-inferiority t statistic", "(b - log2(1 + delta)) / b_se, n_blocks - 1 df"),
        "ni_p": _v((), "one-sided p-value of non-inferiority", "P(T <= ni_t); H0: growth >= delta"),
        "ni_reject": _v((), "non-inferiority shown", "1 if ni_p < alpha (growth < delta per doubling of k)"),
        "ni_blocks": _v((), "blocks in the test", "finished blocks"),
        "level": _v((), "mean E[G] over the k levels of the test", "mean of the block means", nats=True),
        "verdict": _v((), "verdict", "pass, fail or error (protocols/generalisation.md section 7)"),
        "verdict_reason": _v((), "why the check did not pass", "empty when it passed"),
    }
    return {f"{s}_{k}": v.like(long_name=f"{_NI_WHAT[s]}: {v.long_name}") for k, v in out.items()}


_BOUND_SCHEMA = {
    "bound_complexity": _v(P, "Theorem-1 complexity term 2 Rad_n (bound on E[G])",
                           "simkit.exact.bounds.theorem1_bound for the linear class Theta_s (s = ISO_MIN, 9 parameters in "
                           "the Frobenius ball of radius sqrt 3, L_phi = 2/s), loss Lipschitz 4 L_phi/tau and range "
                           "4/tau; NaN for the Fourier family", nats=True),
    "bound_variability": _v(P, "Theorem-1 sample-variability term", "McDiarmid: (4/tau) sqrt(log(1/eta) / (2n)), "
                            "eta = ETA; mean zero, so it bounds G of one training set, not E[G]", nats=True),
    "bound_bias": _v(P, "Theorem-1 1/k term (plug-in, not a bound)", "|c1(identity)| / k: docs/theory.md gives the "
                     "constant of gap_k = c1/k + O(1/k^2) but no bound on |gap_k(phi_hat)| or the remainder", nats=True),
    "bound_total": _v(P, "sum of the three Theorem-1 terms", "complexity + variability + plug-in 1/k term", nats=True),
    "gap_upper": _v(P, "upper MCSE limit of E[G]", "gap_cv + z_(1-alpha) gap_cv_mcse", nats=True),
    "excess_upper": _v(P, "upper MCSE limit of E[E]", "excess + z_(1-alpha) excess_mcse (plain E)", nats=True),
    "bound_ratio": _v(P, "E[G] / complexity term", "how far the realised gap sits below the bound on E[G]"),
    "in_class": _v(P, "fraction of phi_hat in the bound's class", "fraction of blocks with sigma_min/sigma_max of W "
                   ">= ISO_MIN (phi_hat in Theta_s, where the bound applies)"),
    "bound_verdict": _v((), "verdict of the bound check", "pass when gap_upper <= bound_complexity at every "
                        "fully specified point (linear family, all phi_hat in Theta_s); fail otherwise"),
    "bound_reason": _v((), "why the bound check did not pass, and which points are not specified", "text"),
    "bound_max_ratio": _v((), "largest gap_upper / bound_complexity", "over the fully specified points"),
    "bound_points": _v((), "fully specified points", "points where the bound on E[G] is evaluated and applies"),
    "c3_conclusion": _v((), "confirmatory C3 conclusion", "protocols/generalisation.md section 7"),
}

#: every variable and coordinate of the dataset
SCHEMA = {
    **{f"raw_{n}": _v(PB, f"per-block {ln}", d, nats) for n, (ln, nats, d) in QUANTITIES.items()},
    **{f"prep_{n}": _v(P, f"per-point constant {n}", f"{ln}: exact value from the prepare stage", nats=True)
       for n, (ln, _) in PREP_VARS.items()},
    **{n: _v(P, QUANTITIES[n][0], QUANTITIES[n][2], QUANTITIES[n][1]) for n in SUMMARY_VARS},
    **{f"{n}_mcse": _v(P, f"MCSE of {n}", SE, QUANTITIES[n][1]) for n in SUMMARY_VARS},
    **{n: _v(P, ln, d, nats=True) for n, (ln, d) in PREP_VARS.items()},
    "gap_sd": _v(P, "sd of G over training sets", "replicate-to-replicate sd of G (sampling variability of R_hat and "
                 "phi_hat, plus the small evaluation noise gap_eval_mcse)", nats=True),
    "n_finished": _v(P, "finished blocks", "blocks whose task did not raise"),
    **{k: v for s in OLD_SWEEPS for k, v in _sweep_schema(s).items()},
    **{k: v for s in NI_SWEEPS for k, v in _ni_schema(s).items()},
    **_BOUND_SCHEMA,
    "kernel": _v(P, "positive kernel family", "vmf (vMF(x, kappa_M)), rotated (vMF(Rx, kappa_M), R a rotation by "
                 "angle in the (e_1, e_2) plane: not pi-reversible) or brownian (heat kernel at time t)"),
    "pi_family": _v(P, "data distribution family", "uniform, or vmf (mean e_1, concentration kappa_pi)"),
    "kappa_pi": _v(P, "concentration kappa_pi of pi", "0 for uniform pi"),
    "angle": Var(P, "rotation angle of R", "rad", "rotated kernel only; NaN otherwise"),
    "t_brown": _v(P, "Brownian diffusion time t", "heat kernel (generator Laplacian/2) only; NaN otherwise"),
    "point": _v(P, "design point", "sweep=level"),
    "sweep": _v(P, "sweep", "n, k, tau or d: the factor varied at this point"),
    "family": _v(P, "embedding family", "linear (phi = Wx/|Wx|, d = 3) or fourier (simkit.embeddings.lifted.FourierEmbedding, 9 "
                 f"parameters). The Fourier frequency frame is a fixed part of the design, built from "
                 f"simkit.embeddings.lifted.LIFT_SEED = {LIFT_SEED} (attribute lift_seed) in every run, not from the study seed"),
    "n": _v(P, "training tuples n", "size of the training sample"),
    "k": _v(P, "negatives per tuple k", "InfoNCE negatives"),
    "tau": _v(P, "temperature tau", "score phi(x).phi(y)/tau"),
    "d": _v(P, "embedding dimension d", "phi maps S^2 into S^(d-1)"),
    "kappa_m": _v(P, "kernel concentration kappa_M", "M(x, .) = vMF(x, kappa_M) (vMF(Rx, kappa_M) for the rotated "
                  "kernel); NaN for the Brownian kernel"),
}


# ----------------------------------------------------------------------------------------------
# the checks of one sweep

def _rate_sweep(s: str, lv: NDArray, blocks: NDArray, gap: NDArray) -> tuple[dict, list[str], str]:
    """n sweep (H0 slope <= -1/2) or tau sweep (H0 slope >= 0) of log E[G]: values, reasons, verdict."""
    rc = one_sided_rate(lv, blocks, bound=-0.5 if s == "n" else 0.0, alternative="greater" if s == "n" else "less",
                        alpha=ALPHA, power=POWER)
    out = {"slope": rc.slope, "slope_se": rc.se, "slope_t": rc.t, "slope_p": rc.p, "slope_detect": rc.detect,
           "fit": rc.fitted}
    reasons, verdict = [], "fail"
    finite = np.isfinite(rc.slope)
    if not finite:
        reasons.append("mean G not positive at every level: no log-log fit")
    elif s == "n" and rc.reject:
        reasons.append(f"slope {rc.slope:.3f} ± {rc.se:.3f} is above -1/2 (t = {rc.t:.2f} > {rc.critical:.2f})")
    elif s == "tau" and not rc.reject:
        reasons.append(f"slope {rc.slope:.3f} ± {rc.se:.3f}: growth of G as tau falls not shown "
                       f"(t = {rc.t:.2f}, needs < {-rc.critical:.2f})")
    else:
        verdict = "pass"
    if s == "tau":
        out["false_fail"] = rc.miss_rate_at_estimate()
        return out, reasons, verdict
    # the n^{-1/2} sample variability: sd of G from (mean of G, mean of G^2) over blocks
    out["sd_slope"], out["sd_slope_se"] = log_sd_slope(lv, gap) if finite else (np.nan, np.nan)
    return out, reasons, verdict


def _trend_sweep(s: str, lv: NDArray, blocks: NDArray, k_trend_min: int) -> tuple[dict, list[str], str]:
    """k sweep (one-sided: no growth over k >= k_trend_min) or d sweep (two-sided, plus TOST) of E[G]."""
    x = np.log2(lv)
    sel = lv >= k_trend_min if s == "k" else np.ones(lv.size, bool)
    tt = trend_test(x[sel], blocks[:, sel], alternative="greater" if s == "k" else "two-sided", alpha=ALPHA,
                    power=POWER)
    grow = trend_test(x[sel], blocks[:, sel], alternative="greater", alpha=ALPHA, power=POWER)
    level = float(np.mean(mean_mcse(blocks[:, sel], axis=0)[0]))
    out = {"trend": tt.slope, "trend_se": tt.se, "trend_t": tt.t, "trend_p": tt.p, "trend_detect": tt.detect,
           "trend_level": level, "growth_p": grow.p, "rel_trend": tt.slope / level, "rel_trend_se": tt.se / level}
    if s == "d" and np.isfinite(tt.slope):
        # equivalence (two one-sided tests): |trend| < EQUIV_MARGIN * E[G] per doubling
        eq = equivalence_test(tt, EQUIV_MARGIN * level, alpha=ALPHA)
        out.update(equiv_margin=eq.margin, equiv_p=eq.p, equiv_verdict="pass" if eq.passed else "fail",
                   equiv_power0=eq.power0)
    if not np.isfinite(tt.slope):
        return out, ["fewer than 3 finished blocks"], "fail"
    if tt.reject:
        return out, [f"trend {tt.slope:+.4f} ± {tt.se:.4f} nat per doubling of {s} (t = {tt.t:.2f}, critical "
                     f"{tt.critical:.2f})"], "fail"
    return out, [], "pass"


# ----------------------------------------------------------------------------------------------
# the claim checks, one per sweep

def _value(ds: xr.Dataset, name: str):
    return ds[name].values.item() if name in ds.variables else np.nan


def _cfg(ds: xr.Dataset) -> dict:
    try:
        cfg = json.loads(ds.attrs.get("config", "{}"))
    except (TypeError, ValueError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def _levels(ds: xr.Dataset, s: str) -> NDArray:
    return ds[s].values[ds["sweep"].values == s]


def _row(ds: xr.Dataset, s: str, estimate: str, detail: str) -> dict:
    v = lambda name: _value(ds, f"{s}_{name}")  # noqa: E731
    return {"estimate": v(estimate), "estimate_mcse": v(f"{estimate}_se"), "verdict": str(v("verdict")),
            "detail": detail + (f" -> {v('verdict')} ({v('verdict_reason')})" if v("verdict_reason") else "")}


def _n_eval(ds):
    v = lambda name: _value(ds, f"n_{name}")  # noqa: E731
    return _row(ds, "n", "slope", f"n-slope {v('slope'):.3f} ± {v('slope_se'):.3f} (p of H0 <= -1/2: {v('slope_p'):.2g}; "
                f"a slope {v('slope_detect'):.3f} above -1/2 is detected with probability {POWER:g}); sd(G) slope "
                f"{v('sd_slope'):.3f} ± {v('sd_slope_se'):.3f}")


def _k_eval(ds):
    v = lambda name: _value(ds, f"k_{name}")  # noqa: E731
    return _row(ds, "k", "trend", f"k-trend {v('trend'):+.4f} ± {v('trend_se'):.4f} nat per doubling (p "
                f"{v('trend_p'):.2g}); growth of {v('trend_detect'):.4f} nat per doubling "
                f"({100 * v('trend_detect') / v('trend_level'):.0f}% of E[G] = {v('trend_level'):.4f}) is detected "
                f"with probability {POWER:g}")


def _tau_eval(ds):
    v = lambda name: _value(ds, f"tau_{name}")  # noqa: E731
    return _row(ds, "tau", "slope", f"tau-slope {v('slope'):.3f} ± {v('slope_se'):.3f} (p {v('slope_p'):.2g}); "
                "false-failure rate is the plug-in P(no rejection) at the estimated slope")


def _d_eval(ds):
    v = lambda name: _value(ds, f"d_{name}")  # noqa: E731
    return _row(ds, "d", "trend", f"d-trend {v('trend'):+.4f} ± {v('trend_se'):.4f} nat per doubling (p "
                f"{v('trend_p'):.2g}; one-sided p of growth {v('growth_p'):.2g}); a trend of ±{v('trend_detect'):.4f} "
                f"nat ({100 * v('trend_detect') / v('trend_level'):.0f}% of E[G] = {v('trend_level'):.4f}) per "
                f"doubling is detected with probability {POWER:g}; relative trend {100 * v('rel_trend'):+.1f}% ± "
                f"{100 * v('rel_trend_se'):.1f}% per doubling, equivalence within ±{100 * EQUIV_MARGIN:g}% (TOST, "
                f"supplementary): {v('equiv_verdict')} (p {v('equiv_p'):.2g})")


def _pvalue(name: str, alpha: float, ref: str = "exact"):
    """``Check.pvalues`` of a check that is one t test (for calibration): the scalar p-value ``name`` at
    ``alpha``; ``ref`` 'bound' for a one-sided test of a bound (uniform only at its boundary)."""
    return lambda ds: {name.split("_")[1]: (float(_value(ds, name)), alpha, ref)}


#: one check per sweep, in SWEEPS order: C3 (n-slope, k-growth), C5 (tau-slope), C6 (d-trend)
CHECKS = (
    Check("C3", lambda ds: f"slope of log E[G] on log n (k = {int(ds['k'].values[list(ds['sweep'].values).index('n')])}"
          f", linear d = 3), one-sided t test of H0 slope <= -1/2 at {ALPHA:g} (jackknife SE)", _n_eval, ALPHA,
          _pvalue("n_slope_p", ALPHA, "bound")),
    Check("C3", lambda ds: f"slope of E[G] per doubling of k over k >= {int(_cfg(ds).get('k_trend_min', 0))}, one-sided "
          f"t test of H0 slope <= 0 at {ALPHA:g}", _k_eval, ALPHA, _pvalue("k_trend_p", ALPHA, "bound")),
    Check("C5", f"slope of log E[G] on log tau (linear d = 3), one-sided t test of H0 slope >= 0 at {ALPHA:g}: pass = G "
          "shown to grow as tau falls (a test that must reject: its miss rate is 1 - power, not stated; the "
          "power at the estimate, tau_false_fail in the dataset, is not a false-failure rate)", _tau_eval, None),
    Check("C6", lambda ds: f"slope of E[G] per doubling of d (Fourier lift, 9 parameters, Lipschitz 1/sqrt(3), d = "
          f"{int(np.min(_levels(ds, 'd')))}..{int(np.max(_levels(ds, 'd')))}), two-sided t test of H0 slope = 0 at "
          f"{ALPHA:g}", _d_eval, ALPHA, _pvalue("d_trend_p", ALPHA)),
)


# ----------------------------------------------------------------------------------------------
# the pre-registered checks (protocols/generalisation.md)

def ni_verdicts(ni: dict) -> dict[str, tuple[str, str]]:
    """The verdict rule of protocols/generalisation.md section 7 for each NI sweep present.

    ``ni`` maps a sweep to ``(NonInferiority, task errors)``. kprim, krot, kbrown pass when
    non-inferiority (growth < DELTA_K per doubling of k) is shown; the positive control kctl passes
    (behaves) when its b is defined and the same rule does NOT show non-inferiority.
    """
    out = {}
    for s, (res, err) in ni.items():
        if err:
            out[s] = ("error", f"task errors: {err}")
        elif s == "kctl":
            out[s] = (("pass", "") if res.defined and not res.reject else
                      ("fail", f"the positive control passed the non-inferiority rule (p = {res.p:.3g} < {ALPHA:g}): "
                       "the design cannot detect growth in k" if res.defined else
                       "control b undefined (a mean G <= 0 or < 3 blocks): the design cannot detect growth"))
        elif not res.defined:
            out[s] = ("fail", "b undefined (a mean G <= 0 or fewer than 3 blocks): non-inferiority not shown")
        elif res.reject:
            out[s] = ("pass", "")
        else:
            out[s] = ("fail", f"growth {100 * res.growth:+.1f}% per doubling of k: non-inferiority to "
                      f"+{100 * DELTA_K:g}% not shown (p = {res.p:.3g} >= {ALPHA:g})")
    return out


def c3_conclusion(verdicts: dict[str, str]) -> str:
    """The confirmatory C3 conclusion (protocols/generalisation.md section 7) from the kprim and kctl verdicts."""
    prim, ctl = verdicts.get("kprim", "absent"), verdicts.get("kctl", "absent")
    if "error" in (prim, ctl):
        return "error (a task of the primary or control sweep failed)"
    if prim == "absent" or ctl == "absent":
        return "not evaluated (the primary or the control sweep was not run)"
    if ctl != "pass":
        return "not confirmed (inconclusive: the positive control was not flagged)"
    return "confirmed" if prim == "pass" else "not confirmed (growth >= delta not excluded)"


_BOUND_SWEEPS = ("n", "k", "tau") + NI_SWEEPS


def _bound_vars(raw: xr.Dataset, out: dict, points: NDArray) -> dict:
    """Per-point Theorem-1 bound terms and the deterministic bound check (protocols/generalisation.md section 6)."""
    npt = raw.sizes["point"]
    names = ("bound_complexity", "bound_variability", "bound_bias", "bound_total", "bound_ratio", "in_class")
    res = {name: np.full(npt, np.nan) for name in names}
    sweeps, fams = raw["sweep"].values.astype(str), raw["family"].values.astype(str)
    iso = raw["raw_isometry"].values
    for i in range(npt):
        if fams[i] != "linear" or sweeps[i] not in _BOUND_SWEEPS:
            continue
        b = linear_class_bound(int(raw["n"].values[i]), int(raw["k"].values[i]), float(raw["tau"].values[i]),
                               float(raw["prep_c1_id"].values[i]), p=P_DIM, s=ISO_MIN, eta=ETA)
        res["bound_complexity"][i], res["bound_variability"][i] = b.complexity, b.variability
        res["bound_bias"][i], res["bound_total"][i] = b.bias, b.total
        fin = iso[i][np.isfinite(iso[i])]
        res["in_class"][i] = float(np.mean(fin >= ISO_MIN)) if fin.size else np.nan
    res["gap_upper"] = out["gap_cv"] + _Z_UPPER * out["gap_cv_mcse"]
    res["excess_upper"] = out["excess"] + _Z_UPPER * out["excess_mcse"]
    with np.errstate(invalid="ignore", divide="ignore"):
        res["bound_ratio"] = out["gap_cv"] / res["bound_complexity"]
    cmp = compare_to_bound(res["bound_complexity"], res["gap_upper"], res["in_class"])
    spec, bad, outside = cmp.specified, cmp.above, cmp.outside
    reasons = []
    if bad.any():
        reasons.append("E[G] upper limit above the bound at " + ", ".join(str(points[i]) for i in np.flatnonzero(bad)))
    if not spec.any():
        reasons.append("no fully specified point")
    note = []
    if outside.any():
        note.append("not specified (a phi_hat outside Theta_s or no estimate): "
                    + ", ".join(str(points[i]) for i in np.flatnonzero(outside)))
    if np.any(fams == "fourier"):
        note.append("not specified for the Fourier family (W unbounded: no parameter radius)")
    note.append("the 1/k term has no bound constant in docs/theory.md (plug-in |c1(id)|/k reported); the bound on E is "
                "therefore not fully specified, the bound on E[G] is")
    res["bound_verdict"] = np.array("fail" if reasons else "pass")
    res["bound_reason"] = np.array("; ".join(reasons + note))
    res["bound_max_ratio"] = np.array(cmp.max_ratio)
    res["bound_points"] = np.array(float(spec.sum()))
    return res


def _sha(ds):
    return str(ds.attrs.get("protocol_sha256", "?"))[:16]


def _ni_run(ds, s) -> bool:
    return s in set(str(x) for x in ds["sweep"].values)


def _ni_eval(ds, s):
    if not _ni_run(ds, s):  # the quick design runs the exploratory sweeps only
        return {"estimate": np.nan, "estimate_mcse": np.nan, "verdict": "n/a",
                "detail": f"{s}: sweep not in this design (sweeps {', '.join(dict.fromkeys(map(str, ds['sweep'].values)))})"
                          " -> n/a"}
    v = lambda name: _value(ds, f"{s}_{name}")  # noqa: E731
    verdict, reason = str(v("verdict")), str(v("verdict_reason"))
    k = ds["k"].values[ds["sweep"].values == s]
    detail = (f"{s} (k = {int(k.min())}..{int(k.max())}): b = {v('b'):.4f} ± {v('b_se'):.4f} (growth "
              f"{100 * v('growth'):+.1f}% ± {100 * v('growth_se'):.1f}% per doubling of k; mean E[G] {v('level'):.4f}), "
              f"t = {v('ni_t'):.2f} on {int(v('ni_blocks')) - 1} df, one-sided p = {v('ni_p'):.3g} against growth "
              f">= {100 * DELTA_K:g}%")
    if s in ("kprim", "kctl") and "c3_conclusion" in ds.variables:
        detail += f"; C3 conclusion: {_value(ds, 'c3_conclusion')}"
    return {"estimate": v("growth"), "estimate_mcse": v("growth_se"), "verdict": verdict,
            "detail": detail + (f" -> {verdict} ({reason})" if reason else f" -> {verdict}")}


def _ni_stat(s, what):
    return lambda ds: (f"pre-registered rule (protocols/generalisation.md): {what}: not in this design" if not _ni_run(ds, s)
                       else f"pre-registered rule (protocols/generalisation.md, sha256 {_sha(ds)}…): {what}: growth 2^b - 1 "
                       f"of E[G] per doubling of k over k >= {int(_cfg(ds).get('k_trend_min', 0))} (n = "
                       f"{int(ds['n'].values[list(ds['sweep'].values).index(s)])}), one-sided non-inferiority t test of "
                       f"H0 growth >= {100 * DELTA_K:g}% at {ALPHA:g} (jackknife SE)")


#: stated false-failure rate of each non-inferiority check: P(fail | no growth, b = 0) = 1 - power at b = 0
#: with the conservative sigma_b of protocols/generalisation.md section 5 (power 0.89, 0.66, 0.97). The
#: protocol's "alpha per check" is the level of the test, i.e. the rate of a false *pass* at growth delta.
NI_FALSE_FAIL = {"kprim": 1 - 0.89, "krot": 1 - 0.66, "kbrown": 1 - 0.97}

#: one check per NI sweep, in NI_SWEEPS order
NI_CHECKS = (
    Check("C3", _ni_stat("kprim", "linear class, vMF kernel, fresh replicate"), lambda ds: _ni_eval(ds, "kprim"),
          NI_FALSE_FAIL["kprim"], protocol=PROTOCOL_PATH),
    Check("C3", _ni_stat("kctl", "POSITIVE CONTROL, linear class at tau_k = tau sqrt(k_trend_min/k) (complexity term "
                         "grows like sqrt k); must NOT show non-inferiority (fails wrongly with probability <= "
                         f"{ALPHA:g} when its growth is >= delta)"), lambda ds: _ni_eval(ds, "kctl"), ALPHA,
          protocol=PROTOCOL_PATH),
    Check("C7", _ni_stat("krot", "C3 under the rotated vMF kernel vMF(Rx, 10), uniform pi, tau 0.1"),
          lambda ds: _ni_eval(ds, "krot"), NI_FALSE_FAIL["krot"], protocol=PROTOCOL_PATH),
    Check("C7", _ni_stat("kbrown", "C3 under the Brownian kernel (t = 0.2), vMF pi (kappa 2), tau 0.2"),
          lambda ds: _ni_eval(ds, "kbrown"), NI_FALSE_FAIL["kbrown"], protocol=PROTOCOL_PATH),
)


def _bound_eval(ds):
    verdict, reason = str(_value(ds, "bound_verdict")), str(_value(ds, "bound_reason"))
    return {"estimate": _value(ds, "bound_max_ratio"), "estimate_mcse": np.nan, "verdict": verdict,
            "detail": (f"largest (E[G] + {_Z_UPPER:.2f} MCSE) / bound over {int(_value(ds, 'bound_points'))} fully "
                       f"specified points: {_value(ds, 'bound_max_ratio'):.3g} -> {verdict}" + (f" ({reason})" if reason
                                                                                               else ""))}


#: the deterministic check of the realised gap against the value of the bound (no false-failure rate)
BOUND_CHECK = Check("C3", lambda ds: (f"pre-registered bound check (protocols/generalisation.md, sha256 {_sha(ds)}…): "
                                      f"E[G] + z_(1-{ALPHA:g}) MCSE <= the Theorem-1 complexity term 2 Rad_n bound "
                                      f"(simkit.exact.bounds, linear class Theta_{ISO_MIN:g}) at every fully specified point"),
                    _bound_eval, None, protocol=PROTOCOL_PATH)


# ----------------------------------------------------------------------------------------------
# the study

class Generalisation(Study):
    name = "generalisation"
    claim = "C3,C5,C6"
    title = "Claims C3, C5, C6: generalisation gap of trained embeddings"
    cell_dim = "point"
    ademp = {
        "aim": "C3: G = R_k(phi_hat) - R_hat(phi_hat) = O(n^-1/2) and does not grow with k; C5: G grows as tau -> 0; "
               "C6: no explicit dependence of G on the embedding dimension d",
        "data": "uniform pi on S^2, vMF(x, kappa_M) positives, k i.i.d. negatives; ERM over the linear family (d = 3) "
                "for the n, k, tau sweeps and over a random-Fourier lift with 9 parameters and a d-free Lipschitz "
                "constant (d = 6..256) for the d sweep; replicate training sets, common random numbers across the "
                "levels of a sweep",
        "estimand": "E[G] and E[E], E = CE(phi_hat) - (R_hat - log k), per level; slopes in log n, log k, log tau, log d",
        "methods": "L-BFGS-B ERM with restarts; R_k(phi_hat) paired with phi = identity (exact R_k); exact zero-mean "
                   "control variate R_hat(id) - R_k(id); CE by quadrature (simkit.estimators.population); WLS log-log fits with "
                   "jackknife SE; per-block OLS trend slopes; t tests at level ALPHA with stated power",
        "performance": "E[G], E[E] with MCSE per level; n-slope <= -1/2 (one-sided); k-trend <= 0 at large k "
                       "(one-sided, power); tau-slope < 0 (one-sided); d-trend = 0 (two-sided, power); runtimes",
    }
    schema = SCHEMA
    # a sweep's fit and verdict variables exist when the design runs that sweep (--set sweeps)
    optional_vars = frozenset([*(k for s in OLD_SWEEPS for k in _sweep_schema(s)),
                               *(k for s in NI_SWEEPS for k in _ni_schema(s)), "c3_conclusion"])
    checks = CHECKS + NI_CHECKS + (BOUND_CHECK,)
    params = {
        "sweeps": Param("sweeps", str, ",".join(SWEEPS), "comma-separated sweeps to run (the quick design runs the "
                        "exploratory four only)", choices=SWEEPS, multi=True, quick=",".join(OLD_SWEEPS)),
        "n_blocks": Param("n_blocks", int, 16, "replicate training sets (blocks) per level", low=3, high=10000,
                          quick=5),
        "kappa_m": Param("kappa_m", float, 10.0, "kernel concentration kappa_M", low=0.5, high=200.0),
        "tau": Param("tau", float, 0.1, "temperature of the n, k and d sweeps (1/kappa_M: Q = M for the identity)",
                     low=0.01, high=10.0),
        "n_min": Param("n_min", int, 32, "smallest n of the n sweep", low=8, high=1 << 20, quick=64),
        "n_max": Param("n_max", int, 4096, "largest n of the n sweep", low=16, high=1 << 20, quick=1024),
        "n_step": Param("n_step", int, 2, "ratio of successive n", low=2, high=64, quick=4),
        "k_n": Param("k_n", int, 32, "negatives per tuple in the n sweep", low=1, high=4096, quick=16),
        "n_k": Param("n_k", int, 256, "training tuples in the k sweep", low=8, high=1 << 16, quick=128),
        "k_max": Param("k_max", int, 1024, "largest k of the k sweep (grid 1, k_step, k_step^2, ...)", low=4,
                       high=1 << 14, quick=256),
        "k_step": Param("k_step", int, 2, "ratio of successive k", low=2, high=64, quick=4),
        "k_trend_min": Param("k_trend_min", int, 64, "smallest k of the no-growth test", low=1, high=1 << 14,
                             quick=16),
        "taus": Param("taus", float, "1,0.5,0.2,0.1,0.05,0.02", "temperatures of the tau sweep (comma-separated)",
                      quick="0.5,0.1,0.03", multi=True, min_items=2, low=0.0, low_open=True, descending=True,
                      items_doc="positive numbers"),
        "n_tau": Param("n_tau", int, 256, "training tuples in the tau sweep", low=8, high=1 << 16, quick=128),
        "k_tau": Param("k_tau", int, 32, "negatives per tuple in the tau sweep", low=1, high=4096, quick=16),
        "ds": Param("ds", int, "6,8,16,32,64,128,256", "embedding dimensions of the d sweep (even, >= 6)",
                    quick="6,16,64", multi=True, min_items=3, low=6, multiple_of=2,
                    items_doc="even dimensions >= 6 (d = 2m, m >= 3 frequencies)"),
        "n_d": Param("n_d", int, 256, "training tuples in the d sweep", low=8, high=1 << 16, quick=128),
        "k_d": Param("k_d", int, 16, "negatives per tuple in the d sweep", low=1, high=4096, quick=8),
        "restarts": Param("restarts", int, 2, "L-BFGS-B starts per training (best kept)", low=1, high=64),
        "eval_points": Param("eval_points", int, 1 << 21, "embedded points per paired R_k evaluation (tuples = "
                             "eval_points / (k + 2), clipped to [eval_min, eval_max])", low=1024, high=1 << 26,
                             quick=1 << 19),
        "eval_min": Param("eval_min", int, 1024, "fewest evaluation tuples", low=16, high=1 << 20, quick=512),
        "eval_max": Param("eval_max", int, 16384, "most evaluation tuples", low=16, high=1 << 22, quick=8192),
        "ce_anchors": Param("ce_anchors", int, 128, "anchors of the CE estimate (0: no E)", low=0, high=1 << 16,
                            quick=64),
        "ce_positives": Param("ce_positives", int, 4, "positives per CE anchor", low=1, high=256),
    }

    # ------------------------------------------------------------------------------------------
    def check_config(self, cfg):
        if cfg["n_min"] > cfg["n_max"]:
            raise ValueError(f"'n_min' must be <= n_max = {cfg['n_max']}, got {cfg['n_min']}")
        if len(level_grid(cfg["n_min"], cfg["n_max"], cfg["n_step"])) < 3:
            raise ValueError("'n_max' must allow at least 3 levels n_min, n_min * n_step, ... (raise n_max)")
        ks = level_grid(1, cfg["k_max"], cfg["k_step"])
        if sum(k >= cfg["k_trend_min"] for k in ks) < 2:
            raise ValueError(f"'k_trend_min' must leave at least 2 levels of the k grid {ks}, got {cfg['k_trend_min']}")
        if cfg["eval_min"] > cfg["eval_max"]:
            raise ValueError(f"'eval_min' must be <= eval_max = {cfg['eval_max']}, got {cfg['eval_min']}")

    def levels(self, cfg: dict, sweep: str) -> list:
        if sweep in NI_SWEEPS:  # the levels of the pre-registered rule: k >= k_trend_min
            return [k for k in level_grid(1, cfg["k_max"], cfg["k_step"]) if k >= cfg["k_trend_min"]]
        if sweep == "n":
            return level_grid(cfg["n_min"], cfg["n_max"], cfg["n_step"])
        if sweep == "k":
            return level_grid(1, cfg["k_max"], cfg["k_step"])
        if sweep == "tau":
            return self.params["taus"].values(cfg["taus"])
        return self.params["ds"].values(cfg["ds"])

    def cells(self, cfg):
        out = []
        for s in cfg["sweeps"].split(","):
            for v in self.levels(cfg, s):
                if s in NI_SWEEPS:
                    pi, kpi, kern, kappa, angle, t, tau = NI_SETTINGS[s]
                    tau = cfg["tau"] if tau is None else tau
                    out.append({
                        "point": f"{s}={v:g}", "sweep": s, "family": "linear", "n": int(cfg["n_k"]), "k": int(v),
                        "tau": control_tau(tau, v, cfg["k_trend_min"]) if s == "kctl" else float(tau), "d": P_DIM,
                        "kappa_m": float(cfg["kappa_m"] if kappa is None else kappa), "kernel": kern,
                        "pi_family": pi, "kappa_pi": float(kpi), "angle": float(angle), "t_brown": float(t),
                    })
                    continue
                n = {"n": v, "k": cfg["n_k"], "tau": cfg["n_tau"], "d": cfg["n_d"]}[s]
                k = {"n": cfg["k_n"], "k": v, "tau": cfg["k_tau"], "d": cfg["k_d"]}[s]
                out.append({
                    "point": f"{s}={v:g}", "sweep": s, "family": "fourier" if s == "d" else "linear",
                    "n": int(n), "k": int(k), "tau": float(v if s == "tau" else cfg["tau"]),
                    "d": int(v if s == "d" else P_DIM), "kappa_m": float(cfg["kappa_m"]), "kernel": "vmf",
                    "pi_family": "uniform", "kappa_pi": 0.0, "angle": math.nan, "t_brown": math.nan,
                })
        return out

    def block_dims(self, cfg):
        return {name: () for name in BLOCK_VARS}, {}

    @staticmethod
    def pi_kernel(cell: dict):
        """The cell's data distribution and positive kernel (simkit.distributions.designs; a cell without ``kernel`` is vMF/uniform)."""
        kind = cell.get("kernel", "vmf")
        if kind == "vmf" and cell.get("pi_family", "uniform") == "uniform":
            return Uniform(P_DIM), VMFKernel(cell["kappa_m"])
        setting = {"pi": cell["pi_family"], "dim": P_DIM, "kappa_pi": cell["kappa_pi"], "kernel": kind,
                   "kappa_m": cell["kappa_m"], "angle": cell["angle"], "t": cell["t_brown"]}
        return build_pi(setting), build_kernel(setting)

    def prepare(self, cell, cfg, rng):
        pi, kernel = self.pi_kernel(cell)
        tau, k = cell["tau"], cell["k"]
        ce = exact.cross_entropy(pi, kernel, tau, rng=rng)  # exact for uniform or single-vMF pi
        ce_id = float(getattr(ce, "value", ce))
        c1 = exact.bias_constant(pi, kernel, tau, rng=rng)
        uniform_iso = isinstance(pi, Uniform) and kernel.isotropic
        # gap_k and I of the identity are exact only for uniform pi and an isotropic kernel; elsewhere R_k(id)
        # is unknown and only the control-variate G (which does not need it) is estimated
        gap_id = float(exact.gap_exact(kernel, P_DIM, tau, [k])[0]) if uniform_iso else math.nan
        return {"ce_id": np.array(ce_id), "gap_id": np.array(gap_id), "risk_id": np.array(math.log(k) + ce_id + gap_id),
                "entropy": np.array(-exact.mutual_information(kernel, P_DIM) if uniform_iso else math.nan),
                "c1_id": np.array(float(getattr(c1, "value", c1)))}

    def _sample(self, cell, cfg, rng) -> TrainingSample:
        pi, kernel = self.pi_kernel(cell)
        s = cell["sweep"]
        if s == "n":  # first n tuples of one sample of n_max
            full = TrainingSample.draw(pi, kernel, cfg["n_max"], cell["k"], rng=rng)
            n = cell["n"]
            return TrainingSample(full.x[:n], full.x_pos[:n], full.negatives[:n])
        if s == "k" or s in NI_SWEEPS:  # first k negatives of each tuple of one sample with k_max
            full = TrainingSample.draw(pi, kernel, cell["n"], cfg["k_max"], rng=rng)
            return TrainingSample(full.x, full.x_pos, full.negatives[:, :cell["k"]])
        return TrainingSample.draw(pi, kernel, cell["n"], cell["k"], rng=rng)

    def generate(self, cell, cfg, prep, rng):
        """One training set of the cell's sweep and block. Only the block index is taken from the runner's
        ``rng``: the seeds (:data:`SEED_SPLIT`, from the study seed) are shared by the levels of a sweep,
        see docs/design.md, "studies/generalisation"."""
        seeds = common_seeds(cfg["seed"], self.name, {"sweep": cell["sweep"]}, block_of(rng), 4)
        s_sample, s_init, s_restart, s_eval = seeds
        s_pair, s_ce, s_diag = s_eval.spawn(3)
        (pi, kernel), tau, k = self.pi_kernel(cell), cell["tau"], cell["k"]
        sample = self._sample(cell, cfg, np.random.default_rng(s_sample))
        lifted = cell["family"] == "fourier"
        init_rng = np.random.default_rng(s_init)
        if lifted:  # the same W0 at every d (FourierEmbedding.random_like's law)
            init = FourierEmbedding.frame(P_DIM, cell["d"], W=init_rng.standard_normal((P_DIM, P_DIM)), seed=LIFT_SEED)
            risk = LiftedRisk(sample, tau)
        else:
            init = LinearEmbedding.random(P_DIM, P_DIM, rng=init_rng)
            risk = EmpiricalRisk(sample, tau)
        res = train(risk, init, restarts=cfg["restarts"], rng=s_restart)
        phi = res.embedding
        # the reference of the pairing and of the control: the identity (population optimum of the vMF kernel), or
        # the fixed W_ref of ROT_REF_SCALE for the rotated kernel (its R_k is unknown, and G_cv does not need it)
        ident = (LinearEmbedding(np.diag([ROT_REF_SCALE, ROT_REF_SCALE, 1.0])) if cell.get("kernel") == "rotated"
                 else LinearEmbedding.identity(P_DIM))
        train_risk = risk.value(phi)
        train_risk_id = EmpiricalRisk(sample, tau).value(ident)

        # R_k(phi_hat) - R_k(id) on fresh tuples, paired
        n_eval = int(np.clip(cfg["eval_points"] // (k + 2), cfg["eval_min"], cfg["eval_max"]))
        cap = _CHUNK_POINTS if not lifted else min(_CHUNK_POINTS, _CHUNK_VALUES // cell["d"])
        chunk = max(1, cap // (k + 2))
        risk_diff, risk_diff_mcse = paired_risk_difference(phi, ident, pi, kernel, k, n_eval, tau=tau, chunk=chunk,
                                                           rng=s_pair, risk=LiftedRisk if lifted else EmpiricalRisk)
        risk_id = float(prep["risk_id"])
        gap = risk_id + risk_diff - train_risk
        control = train_risk_id - risk_id  # exactly zero mean over training samples
        # R_k(id) cancels from the control-variate G: where it is not known exactly (NaN), G_cv is still exact
        gap_cv = gap + control if math.isfinite(risk_id) else risk_diff - train_risk + train_risk_id

        out = {name: np.nan for name in BLOCK_VARS}
        out.update(gap=gap, gap_cv=gap_cv, gap_eval_mcse=risk_diff_mcse, risk_excess=risk_diff,
                   train_risk=train_risk, train_risk_id=train_risk_id, n_eval=n_eval)
        # the rotated kernel's anisotropic phi_hat defeats the 1e-9 quadrature of Z (measured: no convergence
        # within 2^20 nodes), so E is not computed for it
        if not lifted and cfg["ce_anchors"] > 0 and cell.get("kernel", "vmf") != "rotated":
            g = generalisation(phi, risk, pi, kernel, rng=s_ce, n_anchors=max(8, cfg["ce_anchors"]),
                               n_positives=cfg["ce_positives"])
            out.update(excess=g.excess, excess_cv=g.excess + control, excess_eval_mcse=g.excess_mcse,
                       ce_excess=g.population.cross_entropy - float(prep["ce_id"]), gap_unpaired=g.gap,
                       gap_unpaired_mcse=g.gap_mcse)
        reports = res.reports
        values = np.array([r.value for r in reports])
        out.update(converged=float(res.report.converged), n_converged=float(sum(r.converged for r in reports)),
                   iterations=float(res.report.iterations), grad_norm=res.report.grad_norm,
                   restart_spread=float(values.max() - values.min()))
        if lifted:
            diag_rng = np.random.default_rng(s_diag)
            xd, yd = pi.rvs(_DIAG_POINTS, rng=diag_rng), pi.rvs(_DIAG_POINTS, rng=diag_rng)
            f = phi(xd)
            ev = np.clip(np.linalg.eigvalsh(np.cov(f, rowvar=False)), 0.0, None)
            ref = FourierEmbedding.frame(P_DIM, max(self.params["ds"].values(cfg["ds"])), W=phi.W, seed=LIFT_SEED)
            change = np.abs(np.sum(f * phi(yd), axis=1) - np.sum(ref(xd) * ref(yd), axis=1)) / tau
            out.update(eff_dim=float(ev.sum() ** 2 / np.sum(ev ** 2)), score_change=float(np.mean(change)),
                       lipschitz=phi.param_lipschitz())
        else:
            sv = np.linalg.svd(phi.W, compute_uv=False)
            out.update(isometry=float(sv[-1] / sv[0]))
        return {name: np.asarray(v, dtype=float) for name, v in out.items()}

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> dict:
        out = {}
        for name in SUMMARY_VARS:
            out[name], out[f"{name}_mcse"] = mean_mcse(raw[f"raw_{name}"].values, axis=1)
        g = raw["raw_gap"].values
        finished = np.sum(np.isfinite(g), axis=1)
        out["gap_sd"] = mean_mcse(g, axis=1)[1] * np.sqrt(finished)
        out["n_finished"] = finished.astype(float)
        for name in PREP_VARS:
            out[name] = raw[f"prep_{name}"].values
        sweeps, points = raw["sweep"].values.astype(str), raw["point"].values
        errors = [str(e) for e in raw["cell_error"].values]
        for s in OLD_SWEEPS:
            idx = np.flatnonzero(sweeps == s)
            if not idx.size:
                continue
            lv = raw[s].values[idx].astype(float)
            blocks = raw["raw_gap_cv"].values[idx].T  # (blocks, levels)
            if s in ("n", "tau"):
                vals, reasons, verdict = _rate_sweep(s, lv, blocks, g[idx].T)
                fit = np.full(raw.sizes["point"], np.nan)
                fit[idx] = vals["fit"]
                vals["fit"] = fit
            else:
                vals, reasons, verdict = _trend_sweep(s, lv, blocks, cfg["k_trend_min"])
            err = "; ".join(f"{points[i]}: {errors[i]}" for i in idx if errors[i])
            if err:
                verdict = "error"
                reasons.insert(0, f"task errors: {err}")
            vals.update(verdict=verdict, verdict_reason="; ".join(reasons))
            out.update({f"{s}_{key}": value for key, value in vals.items()})
        ni = {}
        for s in NI_SWEEPS:
            idx = np.flatnonzero(sweeps == s)
            if not idx.size:
                continue
            res = non_inferiority(raw["k"].values[idx].astype(float), raw["raw_gap_cv"].values[idx].T, delta=DELTA_K,
                                  alpha=ALPHA)
            ok = raw["raw_gap_cv"].values[idx].T
            ok = ok[np.all(np.isfinite(ok), axis=1)]
            err = "; ".join(f"{points[i]}: {errors[i]}" for i in idx if errors[i])
            ni[s] = (res, err)
            for key, val in (("b", res.b), ("b_se", res.se), ("growth", res.growth), ("growth_se", res.growth_se),
                             ("ni_t", res.t), ("ni_p", res.p), ("ni_reject", float(res.reject)),
                             ("ni_blocks", float(res.n_blocks)), ("level", float(np.mean(ok)) if ok.size else np.nan)):
                out[f"{s}_{key}"] = np.asarray(val, dtype=float)
        for s, (verdict, reason) in ni_verdicts(ni).items():
            out[f"{s}_verdict"], out[f"{s}_verdict_reason"] = np.array(verdict), np.array(reason)
        if ni:
            out["c3_conclusion"] = np.array(c3_conclusion({s: str(out[f"{s}_verdict"]) for s in ni}))
        out.update(_bound_vars(raw, out, points))
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "power": POWER, "lift_seed": LIFT_SEED, "seed_split": SEED_SPLIT, "delta_k": DELTA_K,
                "iso_min": ISO_MIN, "eta": ETA, **protocol_attrs(PROTOCOL_PATH),
                "analysis": ("quick (CI) design: not the confirmatory run" if cfg.get("quick") else
                             "confirmatory for the NI sweeps and the bound check (protocols/generalisation.md); "
                             "the n, k, tau, d checks are exploratory")}

    def report_sections(self, doc, ds):
        from simkit.report.generalisation import generalisation_sections
        generalisation_sections(doc, ds)

    def claim_rows(self, ds) -> list[dict]:
        """One row per sweep present (``<sweep>_verdict`` in ``ds``), from :data:`CHECKS` and :data:`NI_CHECKS`,
        and the bound check where a bound was evaluated."""
        rows = [check.row(ds) for s, check in zip(SWEEPS, self.checks) if f"{s}_verdict" in ds]
        if "bound_verdict" in ds:
            rows.append(BOUND_CHECK.row(ds))
        return rows

    def summary_text(self, ds) -> str:
        lines = [f"{'point':<12}{'n':>6}{'k':>6}{'tau':>7}{'d':>5}{'E[G] (cv)':>22}{'E[G] (plain)':>22}"
                 f"{'E[E] (cv)':>22}{'sd G':>9}"]
        for i, p in enumerate(ds["point"].values):
            def pm(name):
                m, s = ds[name].values[i], ds[f"{name}_mcse"].values[i]
                return f"{m:>10.5f} ± {s:<8.5f}" if np.isfinite(m) else f"{'n/a':>21}"
            lines.append(f"{p:<12}{int(ds['n'].values[i]):>6}{int(ds['k'].values[i]):>6}{ds['tau'].values[i]:>7.3g}"
                         f"{int(ds['d'].values[i]):>5} {pm('gap_cv')} {pm('gap')} {pm('excess_cv')}"
                         f"{ds['gap_sd'].values[i]:>9.4f}")
        for row in self.claim_rows(ds):
            lines.append(f"{row['claim']}: {row['verdict']} -- {row['detail']}")
        return "\n".join(lines)


STUDY = Generalisation()
