"""Claim C5: temperature as a regulariser -- KL(Q(x,.) || pi) <= 2/tau, small tau inflates the bias, and
the gap becomes sensitive to the norms of the negatives' embeddings (pre-registered, protocols/temperature.md).

Over the C1 catalogue's settings (simkit.distributions.designs.RATE_SETTINGS) and a log grid of tau from
0.02 to 10, the study computes CE, c1, the expansion scales and the per-anchor KL(Q(x, .) || pi) exactly
where it can (simkit.exact; the closed form of simkit.distributions.softmax_kernel) and by Monte Carlo
with MCSE, and checks every exact KL against 2/tau (a deterministic check of the proved bound), CE Monte
Carlo against exact, and the growth of the expansion scale and |c1| as tau falls (exploratory).

Norms clause (confirmatory, protocols/temperature.md; simkit.estimators.norms): for trained embeddings
before normalisation psi(x) = r(x) u_W(x), the gap's sensitivity S = dG/deps to the negatives' norms
must grow as tau falls (one-sided intersection-union test at NORM_ALPHA) while its controls do not pass
(docs/theory.md section 14). The ADEMP statement is the class attribute ``Temperature.ademp`` (stored in
the dataset); in full: docs/design.md, "studies/temperature".

Run it: ``simkit run temperature`` (or ``python -m simkit run temperature``).
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import xarray as xr
from scipy import stats

from simkit import VMFKernel, exact
from simkit.exact.divergence import N_SUP_GRID, N_SUP_PROBES, entropy_h, kl_sup
from simkit.stats.analysis import combine_verdicts, mean_mcse
from simkit.stats.trend import growth_rule
from simkit.distributions.designs import MIXTURE_SEED, MIXTURE_WEIGHTS, RATE_SETTINGS, build_pi
from simkit.estimators.infonce import TAU_MIN, GapEstimator, k_grid
from simkit.embeddings.embedding import LinearEmbedding
from simkit.estimators.norms import FD_STEP, NormProfile, ScaledRisk, gap_sensitivity, train_scaled
from simkit.claims.protocol import protocol_attrs
from simkit.runner import Check, Param, Study, Var, block_of, common_seeds
from simkit.runner.run import ENGINE_SCHEMA
from simkit.distributions.softmax_kernel import kl_direct, kl_importance, kl_q_pi, sample_q
from simkit.distributions.sphere import Uniform
from simkit.embeddings.training import TrainingSample

__all__ = ["ALPHA", "SCHEMA", "STUDY", "Temperature", "critical_values", "tau_grid",
           "NORM_ALPHA", "NORM_B0", "NORM_CHECKS", "PROTOCOL_PATH", "NORM_SEED_GROUP", "norm_verdicts"]

#: family-wise false-failure rate of each statistical C5 check (Bonferroni within a check)
ALPHA = 1e-3
#: importance-form KL estimates with an effective sample size below this are flagged unreliable
ESS_RELIABLE = 100.0
#: predicted start of the 1/k regime: k >= K_ONSET_FACTOR * expansion scale (rate_k's k_min rule)
K_ONSET_FACTOR = 16.0
#: names of the control-variate coefficients stored per k (simkit.estimators.infonce.GapEstimator.calibrate)
CV_TERMS = ("b_A", "b_B", "b_C", "b_E")
#: the catalogue the settings are drawn from (their tau is replaced by the grid)
SETTINGS = RATE_SETTINGS


def tau_grid(tau_min: float, tau_max: float, n: int) -> list[float]:
    """``n`` temperatures spaced evenly in log tau from ``tau_min`` to ``tau_max`` (6 significant digits)."""
    return [float(f"{t:.6g}") for t in np.geomspace(tau_min, tau_max, n)]


def critical_values(cfg: dict) -> dict[str, float]:
    """Critical values of the three statistical checks at family-wise rate ALPHA each (Bonferroni).

    ce: two-sided Student t (n_blocks - 1 df) over the n_set * n_tau cells; kl: one-sided normal
    over every (cell, anchor, estimator); c1: one-sided normal for the one comparison per setting.
    """
    n_set, n_tau, nb = len(cfg["settings"].split(",")), int(cfg["n_tau"]), int(cfg["n_blocks"])
    m_kl = 2 * n_set * n_tau * max(nb * int(cfg["kl_anchors"]), 1)
    return {"ce": float(stats.t.isf(ALPHA / (2 * n_set * n_tau), max(nb - 1, 1))),
            "kl": float(stats.norm.isf(ALPHA / m_kl)),
            "c1": float(stats.norm.isf(ALPHA / max(n_set, 1)))}


# ----------------------------------------------------------------------------------------------
# the dataset's variables

S, T, ST = ("setting",), ("tau",), ("setting", "tau")
STK, STB = ("setting", "tau", "k"), ("setting", "tau", "block")
NATS = "in nats (dimensionless, udunits '1')"
_RAW_KL = "per-anchor KL estimate (simkit.distributions.softmax_kernel)"

#: every variable and coordinate of the dataset
SCHEMA = {
    # design coordinates
    "setting": Var(S, "design setting", "1", "name of the setting in simkit.distributions.designs.RATE_SETTINGS (its tau unused)"),
    "tau": Var(T, "temperature tau", "1", "score s(x, y) = x.y / tau; log grid"),
    "k": Var(("k",), "number of negatives k", "1", "geometric grid 1, 2, 4, ..., k_max"),
    "anchor": Var(("anchor",), "KL anchor within a block", "1",
                  "x ~ pi, with kl_samples draws from pi and from Q(x,.)"),
    "cv_term": Var(("cv_term",), "control-variate coefficient", "1", "b_A, b_B, b_C for gap_k and b_E for gap_k - "
                   "gap_2k (simkit.estimators.infonce.GapEstimator.calibrate)"),
    "pi": Var(S, "data distribution family", "1", f"uniform, vmf (mean e_1) or mixture (weights {MIXTURE_WEIGHTS}, "
              f"means from seed {MIXTURE_SEED}; simkit.distributions.designs.build_pi)"),
    "dim": Var(S, "ambient dimension d", "1", "points on S^{d-1} in R^d"),
    "kappa_pi": Var(S, "concentration of pi", "1", "vMF concentration of pi or of each mixture component"),
    "kappa_m": Var(S, "kernel concentration kappa_M", "1", "M(x, .) = vMF(x, kappa_M)"),
    "cell_error": ENGINE_SCHEMA["cell_error"].like(ST),
    "cell_key": ENGINE_SCHEMA["cell_key"].like((*ST, "key_word")),
    # raw blocks and prepared constants
    **{f"raw_{n}": Var((*STB, "k"), f"per-block {n}, in nats", "1", "raw replicate-block InfoNCE results "
                       f"(simkit.estimators.infonce.BLOCK_STATS); {NATS}") for n in ("gap_cv", "gap_plain", "loss")},
    "raw_ell_inf": Var(STB, "per-block mean of l_inf = -s(x,x+) + log Z(x), in nats", "1", NATS),
    "raw_kl_exact": Var((*STB, "anchor"), "exact KL(Q(x,.) || pi) at a KL anchor, in nats", "1",
                        "closed form (simkit.distributions.softmax_kernel.kl_q_pi)"),
    "raw_kl_q": Var((*STB, "anchor"), "direct KL estimate at a KL anchor, in nats", "1",
                    f"mean of log q over y ~ Q(x,.); {_RAW_KL}"),
    "raw_kl_q_mcse": Var((*STB, "anchor"), "MCSE of raw_kl_q, in nats", "1", "sd over draws / sqrt(kl_samples)"),
    "raw_kl_is": Var((*STB, "anchor"), "importance KL estimate at a KL anchor, in nats", "1",
                     f"mean of q log q over y ~ pi; {_RAW_KL}"),
    "raw_kl_is_mcse": Var((*STB, "anchor"), "MCSE of raw_kl_is, in nats", "1", "sd over draws / sqrt(kl_samples)"),
    "raw_kl_is_ess": Var((*STB, "anchor"), "effective sample size of the importance weights", "1",
                         "(sum q)^2 / sum q^2 over the kl_samples draws y ~ pi"),
    "prep_coef": Var((*STK, "cv_term"), "control-variate coefficients", "1", "from an independent pilot per cell"),
    # cross-entropy
    "ce_exact": Var(ST, "exact cross-entropy CE(M, Q), in nats", "1", "simkit.exact.cross_entropy"),
    "ce_exact_mcse": Var(ST, "MCSE of ce_exact, in nats", "1", "0 where exact (quadrature); Monte Carlo over x "
                         "(the cell's prepare rng) for mixtures"),
    "ce_estimate": Var(ST, "Monte Carlo CE, in nats", "1", "block mean of l_inf = -s(x,x+) + log Z(x)"),
    "ce_estimate_mcse": Var(ST, "MCSE of ce_estimate, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
    "ce_z": Var(ST, "z-score of ce_estimate against ce_exact", "1",
                "(ce_estimate - ce_exact) / sqrt(ce_estimate_mcse^2 + ce_exact_mcse^2)"),
    "entropy": Var(ST, "H = -E_x KL(M(x,.) || pi), in nats", "1", "lower bound of CE, attained when Q = M; "
                   "-I(x; x+) for uniform pi; closed form for a single vMF pi, Monte Carlo for mixtures "
                   "(simkit.exact.divergence.entropy_h)"),
    "entropy_mcse": Var(ST, "MCSE of entropy, in nats", "1", "0 where exact"),
    # bias constant and expansion scales
    "c1_exact": Var(ST, "exact c1, in nats", "1", "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.bias_constant)"),
    "c1_exact_mcse": Var(ST, "MCSE of c1_exact, in nats", "1", "0 where exact; Monte Carlo over x (the cell's "
                         "prepare rng, independent across tau) otherwise"),
    "z2_ratio": Var(ST, "E_x[Z2/Z^2]", "1", "relative second moment of e^s/Z: the expansion scale of the negatives "
                    "(simkit.exact.expansion_scales; nondecreasing in 1/tau)"),
    "m1_ratio": Var(ST, "E_x[m1/Z]", "1", "weight scale of the positive (simkit.exact.expansion_scales)"),
    "expansion_scale": Var(ST, "expansion scale", "1", "max(E[Z2/Z^2], E[m1/Z])"),
    "k_onset": Var(ST, "predicted start of the 1/k regime", "1", f"{K_ONSET_FACTOR:g} x expansion_scale (rate_k's "
                   "k_min rule); the expansion is in powers of the scale over k"),
    "scale_bound": Var(T, "bound e^{2/tau} on Z2/Z^2", "1", "Z2/Z^2 = E_pi q^2 <= sup q <= e^{2/tau} for every pi "
                       "and phi"),
    # KL(Q || pi)
    "kl_bound": Var(T, "bound 2/tau, in nats", "1", "KL(Q(x,.) || pi) <= 2/tau (docs/theory.md section 2)"),
    "kl_mean_exact": Var(ST, "exact E_x KL(Q(x,.) || pi), in nats", "1", "closed form per anchor "
                         "(simkit.distributions.softmax_kernel.kl_q_pi) averaged over x ~ pi by quadrature (Monte Carlo for "
                         "mixtures)"),
    "kl_mean_exact_mcse": Var(ST, "MCSE of kl_mean_exact, in nats", "1", "0 where exact"),
    "kl_sup_exact": Var(ST, "largest exact KL(Q(x,.) || pi) over x, in nats", "1", f"uniform: constant; vMF: max "
                        f"over {N_SUP_GRID} values of mu.x; mixture: max over {N_SUP_PROBES} random probe points (a "
                        "lower bound on the supremum)"),
    "kl_max_anchor_exact": Var(ST, "largest exact KL over the sampled KL anchors, in nats", "1",
                               "closed form at the same anchors as kl_max"),
    "kl_ratio": Var(ST, "looseness: kl_max / (2/tau)", "1", "how far below the bound the largest measured KL lies"),
    "kl_ratio_mcse": Var(ST, "MCSE of kl_ratio", "1", "kl_max_mcse / (2/tau)"),
    "kl_is_ess_min": Var(ST, "smallest effective sample size of the importance weights", "1",
                         f"(sum q)^2 / sum q^2 over the anchors; below {ESS_RELIABLE:g} the importance estimate and "
                         "its MCSE are unreliable"),
    # finite-k gap
    "gap": Var(STK, "finite-k gap R_k - log k - CE, in nats", "1", "block mean of the control-variate estimator "
               "(simkit.estimators.infonce.GapEstimator)"),
    "gap_mcse": Var(STK, "MCSE of gap, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
    "gap_plain": Var(STK, "gap without control variates, in nats", "1", "block mean of l_k - log k - l_inf"),
    "gap_plain_mcse": Var(STK, "MCSE of gap_plain, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
    "k_gap": Var(STK, "k times gap, in nats", "1", "approaches c1 once k >> expansion scale"),
    "k_gap_mcse": Var(STK, "MCSE of k_gap, in nats", "1", "k * gap_mcse"),
    "gap_exact": Var(STK, "exact gap, in nats", "1", "simkit.exact.gap_exact; uniform pi only, NaN otherwise"),
    "gap_z": Var(STK, "z-score of gap against gap_exact", "1", "(gap - gap_exact) / gap_mcse; diagnostic, uniform "
                 "pi only"),
    "loss": Var(STK, "InfoNCE risk R_k, in nats", "1", "block mean of l_k"),
    "loss_mcse": Var(STK, "MCSE of loss, in nats", "1", "sd over blocks / sqrt(n_blocks)"),
    # per-setting descriptive fields
    "tau_c1_peak": Var(S, "tau at which c1 is largest on the grid", "1", "descriptive"),
    "tau_c1_zero": Var(S, "tau at which c1 changes sign", "1", "log-linear interpolation between the grid points "
                       "of the last sign change; NaN if c1 keeps one sign"),
    "scale_slope": Var(S, "log-log slope of E[Z2/Z^2] at the two smallest tau", "1",
                       "descriptive: Z2/Z^2 grows like tau^{-(d-1)/2} for a continuous pi"),
    "scale_slope_predicted": Var(S, "-(d-1)/2", "1", "Laplace approximation of Z and Z2 at small tau"),
    "c1_ratio": Var(S, "|c1(tau_min)| / max |c1| over tau >= 1/kappa_M", "1", "inflation of the bias constant"),
    "c1_ratio_mcse": Var(S, "MCSE of c1_ratio", "1", "delta method from c1_exact_mcse; 0 where c1 is exact"),
    "ce_max_abs_z": Var(S, "largest |ce_z| over tau", "1", "check (ii) requires <= attrs['z_ce']"),
    "kl_ratio_max": Var(S, "largest kl_ratio over tau", "1", "looseness of 2/tau at its tightest"),
    # verdicts
    "verdict_kl_exact": Var(S, "verdict of check (i), exact part", "1", "deterministic: pass when every exact "
                            "per-anchor KL (sampled anchors and kl_sup_exact) is finite and <= 2/tau"),
    "verdict_kl_mc": Var(S, "verdict of check (i), Monte Carlo part", "1", "pass when, for both Monte Carlo "
                         "estimators, kl_upper <= 2/tau at every tau (z = attrs['z_kl'])"),
    "verdict_kl": Var(S, "verdict of check kl", "1", "pass when verdict_kl_exact and verdict_kl_mc pass"),
    "verdict_ce": Var(S, "verdict of check ce", "1", f"pass when |ce_z| <= attrs['z_ce'] at every tau (two-sided t, "
                      f"n_blocks - 1 df, Bonferroni over the cells at {ALPHA:g})"),
    "verdict_c1": Var(S, "verdict of check c1", "1", "pass when E[Z2/Z^2] is nondecreasing as tau decreases and "
                      "|c1(tau_min)| - z MCSE exceeds max over tau >= 1/kappa_M of |c1| + z MCSE (z = attrs['z_c1'])"),
    **{f"verdict_{c}_reason": Var(S, f"why check {c} failed", "1", "empty when it passed") for c in ("kl", "ce", "c1")},
}
for _est, _suffix, _what in (("q", "", "direct: y ~ Q(x,.), mean of log q"),
                             ("is", "_is", "importance: y ~ pi, mean of q log q")):
    SCHEMA.update({
        f"kl_mean{_suffix}": Var(ST, f"Monte Carlo E_x KL(Q(x,.) || pi), {_est}, in nats", "1",
                                 f"mean over the KL anchors of the per-anchor estimate ({_what})"),
        f"kl_mean{_suffix}_mcse": Var(ST, f"MCSE of kl_mean{_suffix}, in nats", "1",
                                      "sd of block means / sqrt(n_blocks): anchors and draws"),
        f"kl{_suffix}_z": Var(ST, f"z-score of the {_est} estimates against the closed form", "1",
                              "block mean of (estimate - exact KL) over the same anchors, over its MCSE; diagnostic "
                              "of the closed form"),
        f"kl_max{_suffix}": Var(ST, f"largest per-anchor Monte Carlo KL, {_est}, in nats", "1",
                                f"max over the n_blocks x kl_anchors KL anchors ({_what})"),
        f"kl_max{_suffix}_mcse": Var(ST, f"MCSE of kl_max{_suffix}, in nats", "1",
                                     "the per-anchor MCSE (sd over draws / sqrt(kl_samples)) of that anchor"),
        f"kl_upper{_suffix}": Var(ST, f"max over anchors of KL_hat - z MCSE, {_est}, in nats", "1",
                                  f"z = attrs['z_kl'] (one-sided, Bonferroni over every cell, anchor and estimator "
                                  f"at {ALPHA:g}); C5 requires kl_upper <= 2/tau"),
    })

#: per-cell constants of the prepare stage and their shapes after the cell dimension (for runs
#: in which no preparation finished)
_PREP = {"c1": (2,), "ce": (2,), "rho": (), "mbar": (), "kl_mean": (2,), "kl_sup": (), "entropy": (2,)}
_RAW = {**{n: ("k",) for n in ("gap_cv", "gap_plain", "loss")}, "ell_inf": (),
        **{n: ("anchor",) for n in ("kl_exact", "kl_q", "kl_q_mcse", "kl_is", "kl_is_mcse", "kl_is_ess")}}


# ----------------------------------------------------------------------------------------------
# summaries (arrays over (setting, tau, ...)); the study's summarise assembles them

def _nan_reduce(fn, a: np.ndarray, axis: int = -1) -> np.ndarray:
    """``fn`` (np.nanmax or np.nanmin) over ``axis`` ignoring non-finite entries; NaN where none is finite."""
    a = np.where(np.isfinite(a), a, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices (failed cells) give NaN, as documented
        return fn(a, axis=axis)


def _value_se(v) -> tuple[float, float]:
    return (float(v.value), float(v.mcse)) if isinstance(v, exact.Estimate) else (float(v), 0.0)


def _grid(raw: xr.Dataset, n_set: int, n_tau: int, shapes: dict):
    """``grid(name)``: a raw variable (cell, ...) as (setting, tau, ...); NaN of the given shape if absent."""
    def grid(name):
        if name not in raw:
            return np.full((n_set, n_tau, *shapes.get(name, ())), np.nan)
        v = raw[name].values
        return v.reshape(n_set, n_tau, *v.shape[1:])
    return grid


def _ce_summary(ell_inf: np.ndarray, ce: np.ndarray, entropy: np.ndarray) -> dict:
    est, se = mean_mcse(ell_inf, axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (est - ce[..., 0]) / np.sqrt(se**2 + ce[..., 1] ** 2)
    return {"ce_exact": ce[..., 0], "ce_exact_mcse": ce[..., 1], "ce_estimate": est, "ce_estimate_mcse": se,
            "ce_z": z, "entropy": entropy[..., 0], "entropy_mcse": entropy[..., 1]}


def _bias_summary(p: dict, taus: np.ndarray) -> dict:
    scale = np.maximum(p["rho"], p["mbar"])
    return {"c1_exact": p["c1"][..., 0], "c1_exact_mcse": p["c1"][..., 1], "z2_ratio": p["rho"],
            "m1_ratio": p["mbar"], "expansion_scale": scale, "k_onset": K_ONSET_FACTOR * scale,
            "scale_bound": np.exp(2.0 / taus)}


def _kl_summary(blocks: dict, p: dict, bound: np.ndarray, z_kl: float) -> dict:
    """KL(Q || pi): exact mean and supremum, both estimators' means, maxima and one-sided upper values."""
    n_set, n_tau = p["kl_sup"].shape
    out = {"kl_bound": bound, "kl_mean_exact": p["kl_mean"][..., 0], "kl_mean_exact_mcse": p["kl_mean"][..., 1],
           "kl_sup_exact": p["kl_sup"]}
    for est, suffix in (("q", ""), ("is", "_is")):
        v, se = blocks[f"kl_{est}"], blocks[f"kl_{est}_mcse"]
        out[f"kl_mean{suffix}"], out[f"kl_mean{suffix}_mcse"] = mean_mcse(v.mean(axis=3), axis=2)
        dm, dm_se = mean_mcse((v - blocks["kl_exact"]).mean(axis=3), axis=2)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[f"kl{suffix}_z"] = dm / dm_se
        flat, flat_se = v.reshape(n_set, n_tau, -1), se.reshape(n_set, n_tau, -1)
        j = np.argmax(np.where(np.isfinite(flat), flat, -np.inf), axis=2)[..., None]
        out[f"kl_max{suffix}"] = np.take_along_axis(flat, j, 2)[..., 0]
        out[f"kl_max{suffix}_mcse"] = np.take_along_axis(flat_se, j, 2)[..., 0]
        out[f"kl_upper{suffix}"] = _nan_reduce(np.nanmax, flat - z_kl * flat_se)
    out["kl_max_anchor_exact"] = _nan_reduce(np.nanmax, blocks["kl_exact"].reshape(n_set, n_tau, -1))
    out["kl_ratio"], out["kl_ratio_mcse"] = out["kl_max"] / bound, out["kl_max_mcse"] / bound
    out["kl_is_ess_min"] = _nan_reduce(np.nanmin, blocks["kl_is_ess"].reshape(n_set, n_tau, -1))
    return out


def _gap_summary(blocks: dict, gap_exact: np.ndarray, k: np.ndarray) -> dict:
    out = {}
    for name, var in (("gap", "gap_cv"), ("gap_plain", "gap_plain"), ("loss", "loss")):
        out[name], out[f"{name}_mcse"] = mean_mcse(blocks[var], axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["gap_z"] = (out["gap"] - gap_exact) / out["gap_mcse"]
    out["k_gap"], out["k_gap_mcse"] = out["gap"] * k, out["gap_mcse"] * k
    out["gap_exact"] = gap_exact
    return out


def _kl_problems(kl_exact: np.ndarray, sup: np.ndarray, up: np.ndarray, up_is: np.ndarray, bound: np.ndarray,
                 taus: np.ndarray, z_kl: float) -> tuple[list[str], list[str]]:
    """Check (i) for one setting: (problems of the exact part, problems of the Monte Carlo part)."""
    exact_probs, mc_probs = [], []
    if not (np.all(np.isfinite(kl_exact)) and np.all(np.isfinite(sup))):
        exact_probs.append("missing exact KL values")
    elif np.any(kl_exact > bound[:, None]) or np.any(sup > bound):
        exact_probs.append("an exact per-anchor KL exceeds 2/tau")
    for u, what in ((up, "direct"), (up_is, "importance")):
        if not np.all(np.isfinite(u)):
            mc_probs.append(f"{what}: no finite estimates at some tau")
        elif np.any(u > bound):
            mc_probs.append(f"{what}: KL_hat - {z_kl:.2f} MCSE exceeds 2/tau at tau = "
                            f"{', '.join(f'{t:g}' for t in taus[u > bound])}")
    return exact_probs, mc_probs


def _ce_problems(z: np.ndarray, taus: np.ndarray, z_ce: float) -> list[str]:
    """Check (ii) for one setting."""
    if not np.all(np.isfinite(z)):
        return ["no finite z-score at some tau"]
    bad = np.abs(z) > z_ce
    if np.any(bad):
        return [f"|z| > {z_ce:.2f} at tau = " + ", ".join(f"{t:g} (z = {zz:+.2f})" for t, zz in zip(taus[bad], z[bad]))]
    return []


def _c1_problems(c1: np.ndarray, c1_se: np.ndarray, rho: np.ndarray, taus: np.ndarray, kappa_m: float,
                 z_c1: float) -> tuple[list[str], float, float]:
    """Check (iii) for one setting: (problems, |c1(tau_min)| / max |c1(tau >= 1/kappa_M)|, its MCSE)."""
    probs, ratio, ratio_se = [], math.nan, math.nan
    r_seq = rho[np.argsort(taus)[::-1]]  # by decreasing tau
    if not np.all(np.isfinite(r_seq)):
        probs.append("missing expansion scales")
    elif np.any(np.diff(r_seq) < -1e-12 * np.abs(r_seq[1:])):
        probs.append("E[Z2/Z^2] decreases as tau decreases somewhere on the grid")
    ref = taus >= 1.0 / kappa_m
    small = int(np.argmin(taus))
    if not ref.any() or taus[small] >= 1.0 / kappa_m:
        probs.append(f"the grid must reach both sides of 1/kappa_M = {1 / kappa_m:g}")
    elif not np.all(np.isfinite(c1)):
        probs.append("missing c1 values")
    else:
        jr = int(np.argmax(np.abs(c1) * ref))
        ratio = abs(c1[small]) / abs(c1[jr])
        ratio_se = ratio * math.hypot(c1_se[small] / c1[small], c1_se[jr] / c1[jr])
        if not abs(c1[small]) - z_c1 * c1_se[small] > np.max(np.abs(c1[ref]) + z_c1 * c1_se[ref]):
            probs.append(f"|c1(tau_min)| = {abs(c1[small]):.4g} does not exceed max |c1| = "
                         f"{np.max(np.abs(c1[ref])):.4g} over tau >= 1/kappa_M (with {z_c1:.2f} MCSE margins)")
    return probs, ratio, ratio_se


def _c1_shape(c1: np.ndarray, rho: np.ndarray, taus: np.ndarray, dim: int) -> dict:
    """Descriptive fields of one setting: where c1 peaks and changes sign; growth of the expansion scale."""
    out = {"tau_c1_peak": math.nan, "tau_c1_zero": math.nan, "scale_slope": math.nan,
           "scale_slope_predicted": -(dim - 1) / 2}
    if np.all(np.isfinite(c1)):
        out["tau_c1_peak"] = taus[int(np.argmax(c1))]
        ch = np.nonzero(np.sign(c1)[:-1] != np.sign(c1)[1:])[0]
        if ch.size:
            j = int(ch[-1])
            c, lt = c1[j:j + 2], np.log(taus[j:j + 2])
            out["tau_c1_zero"] = float(np.exp(lt[0] - c[0] * (lt[1] - lt[0]) / (c[1] - c[0])))
    if taus.size >= 2 and np.all(rho[:2] > 0):
        out["scale_slope"] = np.log(rho[1] / rho[0]) / np.log(taus[1] / taus[0])
    return out


def _verdict(problems: list[str], errors: list[str]) -> tuple[str, str]:
    if errors:
        head = f"{len(errors)} cell(s) with task errors (see cell_error); "
        return "error", (head + "; ".join(problems)).rstrip("; ")
    return ("pass" if not problems else "fail"), "; ".join(problems)


def _setting_verdicts(i: int, s: dict, ex: np.ndarray, cell_error: np.ndarray, taus: np.ndarray, kappa_m: float,
                      dim: int, crit: dict) -> dict:
    """Verdicts, reasons and descriptive fields of setting ``i`` from the summaries ``s``."""
    errors = [str(e) for e in cell_error[i] if str(e)]
    exact_probs, mc_probs = _kl_problems(ex[i], s["kl_sup_exact"][i], s["kl_upper"][i], s["kl_upper_is"][i],
                                         s["kl_bound"], taus, crit["kl"])
    c1_probs, ratio, ratio_se = _c1_problems(s["c1_exact"][i], s["c1_exact_mcse"][i], s["z2_ratio"][i], taus,
                                             kappa_m, crit["c1"])
    out = {"c1_ratio": ratio, "c1_ratio_mcse": ratio_se, **_c1_shape(s["c1_exact"][i], s["z2_ratio"][i], taus, dim),
           "ce_max_abs_z": _nan_reduce(np.nanmax, np.abs(s["ce_z"][i]), axis=0),
           "kl_ratio_max": _nan_reduce(np.nanmax, s["kl_ratio"][i], axis=0)}
    out["verdict_kl_exact"] = _verdict(exact_probs, errors)[0]
    out["verdict_kl_mc"] = _verdict(mc_probs, errors)[0]
    for c, probs in (("kl", exact_probs + mc_probs), ("ce", _ce_problems(s["ce_z"][i], taus, crit["ce"])),
                     ("c1", c1_probs)):
        out[f"verdict_{c}"], out[f"verdict_{c}_reason"] = _verdict(probs, errors)
    return out


# ----------------------------------------------------------------------------------------------
# claim checks (claim rows of simkit validate)

def _why(ds: xr.Dataset, c: str, n: int) -> str:
    r = str(ds[f"verdict_{c}_reason"].values[n])
    return f" ({r})" if r else ""


def _argmax2(a: np.ndarray) -> tuple[int, int]:
    return np.unravel_index(int(np.argmax(np.where(np.isfinite(a), a, -np.inf))), a.shape)


def _kl_exact_check(ds: xr.Dataset) -> dict:
    bound = ds["kl_bound"].values
    ratio = np.fmax(ds["kl_max_anchor_exact"].values, ds["kl_sup_exact"].values) / bound
    i, j = _argmax2(ratio)
    detail = "; ".join(
        f"{s}: largest exact KL/(2/tau) = {float(_nan_reduce(np.nanmax, ratio[n], axis=0)):.3g} -> "
        f"{ds['verdict_kl_exact'].values[n]}"
        f"{_why(ds, 'kl', n) if str(ds['verdict_kl_exact'].values[n]) != 'pass' else ''}"
        for n, s in enumerate(ds["setting"].values))
    return {"estimate": ratio[i, j], "estimate_mcse": 0.0, "verdict": combine_verdicts(ds["verdict_kl_exact"].values),
            "detail": detail}


def _kl_mc_check(ds: xr.Dataset) -> dict:
    ratio = ds["kl_ratio"].values
    i, j = _argmax2(ratio)
    detail = "; ".join(
        f"{s}: max KL/(2/tau) = {float(ds['kl_ratio_max'].values[n]):.3g}, at tau_min KL max "
        f"{float(ds['kl_max'].values[n, 0]):.3g} ± {float(ds['kl_max_mcse'].values[n, 0]):.2g} vs 2/tau = "
        f"{float(ds['kl_bound'].values[0]):.3g} -> {ds['verdict_kl_mc'].values[n]}"
        f"{_why(ds, 'kl', n) if str(ds['verdict_kl_mc'].values[n]) != 'pass' else ''}"
        for n, s in enumerate(ds["setting"].values))
    return {"estimate": ratio[i, j], "estimate_mcse": ds["kl_ratio_mcse"].values[i, j],
            "verdict": combine_verdicts(ds["verdict_kl_mc"].values), "detail": detail}


def _ce_check(ds: xr.Dataset) -> dict:
    z = ds["ce_z"].values
    i, j = _argmax2(np.abs(z))
    detail = "; ".join(f"{s}: max |z| = {float(ds['ce_max_abs_z'].values[n]):.2f} -> {ds['verdict_ce'].values[n]}"
                       f"{_why(ds, 'ce', n)}" for n, s in enumerate(ds["setting"].values))
    return {"estimate": z[i, j], "estimate_mcse": 1.0, "verdict": combine_verdicts(ds["verdict_ce"].values),
            "detail": detail}


def _c1_check(ds: xr.Dataset) -> dict:
    f = {n: ds[n].values for n in ("tau_c1_peak", "tau_c1_zero", "c1_ratio", "scale_slope", "scale_slope_predicted")}
    detail = "; ".join(
        f"{s}: c1 peaks at tau = {f['tau_c1_peak'][n]:.3g}, changes sign at tau = {f['tau_c1_zero'][n]:.3g}, "
        f"|c1(tau_min)| / max |c1(tau >= 1/kappa_M)| = {f['c1_ratio'][n]:.3g}, E[Z2/Z^2] slope "
        f"{f['scale_slope'][n]:.2f} (-(d-1)/2 = {f['scale_slope_predicted'][n]:.1f}) -> {ds['verdict_c1'].values[n]}"
        f"{_why(ds, 'c1', n)}" for n, s in enumerate(ds["setting"].values))
    w = int(np.argmin(np.where(np.isfinite(f["c1_ratio"]), f["c1_ratio"], np.inf)))
    return {"estimate": f["c1_ratio"][w], "estimate_mcse": ds["c1_ratio_mcse"].values[w],
            "verdict": combine_verdicts(ds["verdict_c1"].values), "detail": detail}


def _ce_pvalues(ds: xr.Dataset) -> dict[str, tuple[float, float]]:
    """Component tests of the CE check (for calibration): per (setting, tau), the two-sided Student t p-value
    of ce_z on n_blocks - 1 df, at the Bonferroni level ALPHA / (n_set n_tau), so that the check fails
    exactly when one of them rejects. Uniform when CE(M, Q) is the exact value (a point null)."""
    z = ds["ce_z"].values
    nb, (n_set, n_tau) = ds.sizes["block"], z.shape
    alpha = ALPHA / (n_set * n_tau)
    labels = ds["setting_label"].values if "setting_label" in ds.variables else ds["setting"].values
    return {f"{s}:ce@tau={float(t):.4g}": (float(2 * stats.t.sf(abs(z[i, j]), max(nb - 1, 1)))
                                            if np.isfinite(z[i, j]) else math.nan, alpha)
            for i, s in enumerate(labels) for j, t in enumerate(ds["tau"].values)}


def _cells_text(ds: xr.Dataset) -> str:
    return f"{ds.sizes['setting']} settings x {ds.sizes['tau']} tau"


CHECKS = (
    Check("C5", lambda ds: f"deterministic check: every exact per-anchor KL(Q(x,.)||pi) (sampled anchors and the "
                           f"largest over x) <= 2/tau, {_cells_text(ds)}; estimate: the largest exact KL / (2/tau)",
          _kl_exact_check, None),
    Check("C5", lambda ds: f"max over anchors of KL(Q(x,.)||pi) / (2/tau), {_cells_text(ds)}; Monte Carlo: "
                           f"KL_hat - {ds.attrs['z_kl']:.2f} MCSE <= 2/tau for both estimators (a proven "
                           f"inequality: no false-failure rate is stated)",
          _kl_mc_check, None),
    Check("C5", lambda ds: f"CE Monte Carlo (block mean of l_inf) against exact CE at every tau: |z| <= "
                           f"{ds.attrs['z_ce']:.2f} (Bonferroni t)", _ce_check, ALPHA, _ce_pvalues),
    Check("C5", "small tau inflates the bias: E[Z2/Z^2] nondecreasing as tau decreases; |c1(tau_min)| > max |c1| "
                "over tau >= 1/kappa_M (estimate: the smallest ratio of the two over settings; a test that must "
                "reject: its level is a false-pass rate, its miss rate is 1 - power and is not stated)", _c1_check, None),
)


# ----------------------------------------------------------------------------------------------
# the norms clause of C5 (pre-registered: protocols/temperature.md)
#
# Embeddings before normalisation, psi(x) = r(x) u_W(x) (simkit.estimators.norms): the score carries the norms.
# One cell per temperature of the norms grid (setting NORMS_SETTING); every tau of a block shares its
# training sample, initial W and fresh tuples (common random numbers, seeds from NORM_SEED_GROUP).

PROTOCOL_PATH = "protocols/temperature.md"
#: setting name of the norms cells; not in RATE_SETTINGS, so the KL / CE / c1 cells and their seeds are unchanged
NORMS_SETTING = "norms"
#: one-sided level of each of the two tests of the norms rule (simkit.stats.trend.growth_rule)
NORM_ALPHA = 0.01
#: margin: H1 says the sensitivity at least doubles over the 50-fold grid tau = 1 .. 0.02, b < -ln 2 / ln 50
NORM_B0 = -math.log(2.0) / math.log(50.0)
#: planned false-failure rate of the primary rule: 1 - power at the design alternative (protocols/temperature.md 5)
NORM_BETA = 0.10
#: input dimension of the norms design (pi uniform on S^2; u_W: S^2 -> S^2, W 3 x 3)
P_NORM = 3
NORM_SEED_SPLIT = ("norms part, per block: SeedSequence(seed, spawn_key=(*cell_key('temperature', {'design': "
                   "'norms'}), 1, block)).spawn(3) -> training sample, initial W, fresh tuples; shared by every tau")
#: the cells that share a norms block's seeds (simkit.runner.common_seeds): every tau of the norms design
NORM_SEED_GROUP = {"design": "norms"}


#: per-block quantities of the norms part: (long name, in nats, description)
NORM_QUANTITIES = {
    "gap": ("G of phi_hat, plain", True, "mean l_k over the fresh tuples - mean over the training tuples, at the "
            "trained phi_hat (psi = r u_W)"),
    "gap_ref": ("G of the fixed reference", True, "the same for psi = r(x) x (u = identity, not trained): zero mean"),
    "gap_cv": ("G, control variate", True, "gap - gap_ref (exactly zero-mean control): the estimate of G"),
    "sens": ("S of phi_hat, plain", True, "dG^eps/deps at 0 under psi(y_j) -> e^eps psi(y_j) for the negatives, "
             "pathwise: mean sum_j p_j s_j (fresh) - mean (train) (simkit.estimators.norms.gap_sensitivity)"),
    "sens_fd": ("S of phi_hat by finite difference", True, f"(G^h - G^-h) / 2h, h = {FD_STEP:g}, common random "
                "numbers (same phi_hat, same tuples)"),
    "sens_ref": ("null control: S of the fixed reference", True, "zero mean exactly (the reference does not depend "
                 "on the training sample)"),
    "sens_cv": ("S, control variate", True, "sens - sens_ref: the primary estimate of the sensitivity"),
    "sens_ignored": ("control: S with the norms changed in a score-ignored component", True,
                     "mode 'ignored' of simkit.estimators.norms: the negatives' norms change by e^eps as in 'sens', the score "
                     "does not see it; 0 up to rounding"),
    "sens_eval_mcse": ("evaluation MCSE of the fresh-tuple mean of dl/deps", True, "sd / sqrt(norm_eval)"),
    "gap_eval_mcse": ("evaluation MCSE of the fresh-tuple mean of l_k", True, "sd / sqrt(norm_eval)"),
    "train_risk": ("R_hat(phi_hat)", True, "empirical risk of the trained embedding"),
    "converged": ("L-BFGS-B converged", False, "1 if the success flag was set"),
    "iterations": ("L-BFGS-B iterations", False, "one start"),
    "grad_norm": ("final gradient norm", False, "max abs component"),
    "skipped": ("norms block not run", False, "1 for a block >= norm_blocks (all other values NaN)"),
}
#: raw block variables of the norms cells (the KL / CE / c1 cells leave them NaN, and the norms cells theirs)
_NORM_RAW = {f"norm_{n}": () for n in NORM_QUANTITIES}
NORM_CONTROLS = {"primary": "sens_cv", "null": "sens_ref", "ignored": "sens_ignored"}
_RULE_FIELDS = {
    "b": "OLS slope of log E[S] on log tau (block-mean curve)", "b_se": "delete-one-block jackknife SE of b",
    "t": "(b - b0) / b_se on norm_blocks - 1 df", "p": "one-sided P(T <= t); H0 b >= b0",
    "level": "E[S] at the smallest tau, in nats", "level_se": "MCSE of level, in nats",
    "level_t": "level / level_se", "level_p": "one-sided P(T >= level_t); H0 E[S](tau_min) <= 0",
    "ratio": "E[S](tau_min) / E[S](tau_max)", "passed": "1 if both one-sided tests reject at alpha (rule passes)",
    "defined": "1 if every block mean and jackknife replicate is > 0", "n_blocks": "finished blocks",
}
_RULE_NAMES = {"primary": "primary S (control variate)", "null": "null control S of the fixed reference",
               "ignored": "control S with a score-ignored component"}
TN, TB = ("tau_n",), ("tau_n", "norm_block")


def _norm_schema() -> dict:
    out = {
        "tau_n": Var(TN, "temperature tau of the norms design", "1", "score psi(x).psi(y)/tau, psi = r u_W"),
        "norm_block": Var(("norm_block",), "replicate block of the norms design", "1", "independent training samples"),
        **{f"raw_norm_{n}": Var(TB, f"per-block {ln}" + (", in nats" if nats else ""), "1", d)
           for n, (ln, nats, d) in NORM_QUANTITIES.items()},
    }
    for n in ("gap_cv", "gap", "sens_cv", "sens", "sens_ref", "sens_ignored", "sens_fd", "train_risk"):
        ln, _, d = NORM_QUANTITIES[n]
        out[f"norm_{n}"] = Var(TN, f"E[{ln}], in nats", "1", f"mean over blocks; {d}")
        out[f"norm_{n}_mcse"] = Var(TN, f"MCSE of norm_{n}, in nats", "1", "sd over blocks / sqrt(blocks)")
    out.update({
        "norm_gap_tau": Var(TN, "normalised gap G tau, in nats", "1", "tau x norm_gap_cv: flat in tau if G grows "
                            "only like the 1/tau scale of the scores"),
        "norm_gap_tau_mcse": Var(TN, "MCSE of norm_gap_tau, in nats", "1", "tau x norm_gap_cv_mcse"),
        "norm_sens_tau": Var(TN, "normalised sensitivity S tau, in nats", "1", "tau x norm_sens_cv"),
        "norm_sens_tau_mcse": Var(TN, "MCSE of norm_sens_tau, in nats", "1", "tau x norm_sens_cv_mcse"),
        "norm_fd_rel_error": Var(TN, "largest |S_fd - S| / |S| over blocks", "1",
                                 "finite difference against the pathwise derivative (same phi_hat and tuples)"),
        "norm_converged": Var(TN, "fraction of converged trainings", "1", "L-BFGS-B success flag"),
        "norm_iterations": Var(TN, "mean L-BFGS-B iterations", "1", "over blocks"),
        "norm_r_min": Var((), "smallest norm factor r = e^-beta", "1", "r(x) = exp(beta e_1.x)"),
        "norm_r_max": Var((), "largest norm factor r = e^beta", "1", "r(x) = exp(beta e_1.x)"),
        "norm_gap_slope": Var((), "secondary: slope of log E[G] on log tau", "1", "block-mean curve of gap_cv, "
                              "jackknife SE; -1 is the 1/tau scaling of the scores, below -1 is growth beyond it"),
        "norm_gap_slope_se": Var((), "jackknife SE of norm_gap_slope", "1", "NaN if a block mean of G is <= 0"),
        "norm_sens_slope_tau": Var((), "secondary: slope of log E[S tau] on log tau", "1", "norm_primary_b + 1"),
        "norm_verdict": Var((), "verdict of the pre-registered primary rule", "1", "pass when growth_rule passes on "
                            "sens_cv (protocols/temperature.md section 7)"),
        "norm_verdict_reason": Var((), "why the primary rule did not pass", "1", "empty when it passed"),
        "norm_null_verdict": Var((), "verdict of the null control", "1", "pass when the rule does NOT pass on sens_ref"),
        "norm_null_verdict_reason": Var((), "why the null control check did not pass", "1", "empty when it passed"),
        "norm_ignored_verdict": Var((), "verdict of the score-ignored control", "1",
                                    "pass when the rule does NOT pass on sens_ignored"),
        "norm_ignored_verdict_reason": Var((), "why the score-ignored control check did not pass", "1",
                                           "empty when it passed"),
        "norm_conclusion": Var((), "confirmatory conclusion on the norms clause of C5", "1",
                               "confirmed / not confirmed (protocols/temperature.md section 7)"),
    })
    for c, what in _RULE_NAMES.items():
        for f, d in _RULE_FIELDS.items():
            out[f"norm_{c}_{f}"] = Var((), f"{what}: {f}", "1", d)
    return out


SCHEMA.update(_norm_schema())


def _norm_generate(cell: dict, cfg: dict, rng: np.random.Generator) -> dict:
    """One norms block at the cell's tau: train u_W on the block's sample, then G and S of phi_hat, of the
    fixed reference, and with the score-ignored component."""
    block = block_of(rng)
    out = {name: np.nan for name in NORM_QUANTITIES}
    if block >= cfg["norm_blocks"]:
        out["skipped"] = 1.0
        return {f"norm_{n}": np.asarray(v, dtype=float) for n, v in out.items()}
    s_sample, s_init, s_eval = common_seeds(cfg["seed"], "temperature", NORM_SEED_GROUP, block, 3)
    pi, kernel, tau, k = Uniform(P_NORM), VMFKernel(cell["kappa_m"]), cell["tau"], cfg["norm_k"]
    sample = TrainingSample.draw(pi, kernel, cfg["norm_n"], k, rng=np.random.default_rng(s_sample))
    init = LinearEmbedding.random(P_NORM, P_NORM, rng=np.random.default_rng(s_init))
    fresh = TrainingSample.draw(pi, kernel, cfg["norm_eval"], k, rng=np.random.default_rng(s_eval))
    profile = NormProfile.axis(cfg["norm_beta"], P_NORM)
    train_risk, fresh_risk = ScaledRisk(sample, tau, profile), ScaledRisk(fresh, tau, profile)
    phi, rep = train_scaled(train_risk, init, maxiter=cfg["norm_maxiter"])
    a = gap_sensitivity(phi, train_risk, fresh_risk)
    ref = gap_sensitivity(LinearEmbedding.identity(P_NORM), train_risk, fresh_risk)
    ign = gap_sensitivity(phi, train_risk, fresh_risk, mode="ignored")
    out.update(gap=a.gap, gap_ref=ref.gap, gap_cv=a.gap - ref.gap, sens=a.sens, sens_fd=a.sens_fd, sens_ref=ref.sens,
               sens_cv=a.sens - ref.sens, sens_ignored=ign.sens_fd, sens_eval_mcse=a.sens_eval_mcse,
               gap_eval_mcse=a.gap_eval_mcse, train_risk=rep["value"], converged=float(rep["converged"]),
               iterations=float(rep["iterations"]), grad_norm=rep["grad_norm"], skipped=0.0)
    return {f"norm_{n}": np.asarray(v, dtype=float) for n, v in out.items()}


def norm_verdicts(primary, null, ignored, errors: str) -> dict:
    """The verdict rule of protocols/temperature.md section 7 from the three growth_rule results."""
    out = {}
    if errors:
        for c in ("", "_null", "_ignored"):
            out[f"norm{c}_verdict"], out[f"norm{c}_verdict_reason"] = "error", f"task errors: {errors}"
        out["norm_conclusion"] = "not confirmed (task errors)"
        return out
    out["norm_verdict"], out["norm_verdict_reason"] = ("pass", "") if primary.passed else ("fail", primary.reason)
    for c, r in (("null", null), ("ignored", ignored)):
        out[f"norm_{c}_verdict"], out[f"norm_{c}_verdict_reason"] = (
            ("fail", "the control passed the rule: the design cannot tell growth from noise") if r.passed
            else ("pass", ""))
    if out["norm_null_verdict"] != "pass" or out["norm_ignored_verdict"] != "pass":
        out["norm_conclusion"] = "not confirmed (inconclusive: a control passed the rule)"
    elif primary.passed:
        out["norm_conclusion"] = "confirmed"
    else:
        out["norm_conclusion"] = "not confirmed (growth of the sensitivity as tau falls not shown)"
    return out


def _norm_summary(raw: xr.Dataset, taus: np.ndarray, nb: int) -> dict:
    """Summaries, rules and verdicts of the norms part from its raw cells (tau_n, norm_block)."""
    v = {n: raw[f"raw_norm_{n}"].values for n in NORM_QUANTITIES}
    out = {f"raw_norm_{n}": a for n, a in v.items()}
    for n in ("gap_cv", "gap", "sens_cv", "sens", "sens_ref", "sens_ignored", "sens_fd", "train_risk"):
        out[f"norm_{n}"], out[f"norm_{n}_mcse"] = mean_mcse(v[n], axis=1)
    out["norm_gap_tau"], out["norm_gap_tau_mcse"] = taus * out["norm_gap_cv"], taus * out["norm_gap_cv_mcse"]
    out["norm_sens_tau"], out["norm_sens_tau_mcse"] = taus * out["norm_sens_cv"], taus * out["norm_sens_cv_mcse"]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["norm_fd_rel_error"] = _nan_reduce(np.nanmax, np.abs(v["sens_fd"] - v["sens"]) / np.abs(v["sens"]))
    out["norm_converged"], out["norm_iterations"] = mean_mcse(v["converged"], axis=1)[0], mean_mcse(
        v["iterations"], axis=1)[0]
    rules = {c: growth_rule(taus, v[q].T, b0=NORM_B0, alpha=NORM_ALPHA) for c, q in NORM_CONTROLS.items()}
    for c, r in rules.items():
        for f in _RULE_FIELDS:
            out[f"norm_{c}_{f}"] = float(getattr(r, "se" if f == "b_se" else f))
    g = growth_rule(taus, v["gap_cv"].T, b0=0.0, alpha=0.5)  # descriptive slope of log E[G] only
    out["norm_gap_slope"], out["norm_gap_slope_se"] = g.b, g.se
    out["norm_sens_slope_tau"] = rules["primary"].b + 1.0
    errors = "; ".join(f"tau = {t:g}: {e}" for t, e in zip(taus, raw["cell_error"].values) if str(e))
    out.update(norm_verdicts(rules["primary"], rules["null"], rules["ignored"], errors))
    return out


def _norm_rule_text(ds: xr.Dataset, c: str) -> str:
    g = lambda f: float(ds[f"norm_{c}_{f}"].values)  # noqa: E731
    return (f"slope b = {g('b'):.3f} ± {g('b_se'):.3f} (H0 b >= {NORM_B0:.3f}: t = {g('t'):.2f}, p = {g('p'):.3g}); "
            f"E[S](tau_min) = {g('level'):.4g} ± {g('level_se'):.2g} (p = {g('level_p'):.3g}); "
            f"ratio tau_min/tau_max {g('ratio'):.3g}; {int(g('n_blocks'))} blocks")


def _norm_eval(ds: xr.Dataset, c: str) -> dict:
    name = {"primary": "norm_verdict", "null": "norm_null_verdict", "ignored": "norm_ignored_verdict"}[c]
    verdict, reason = str(ds[name].values), str(ds[f"{name}_reason"].values)
    detail = f"{_RULE_NAMES[c]}: {_norm_rule_text(ds, c)} -> {verdict}" + (f" ({reason})" if reason else "")
    if c == "primary":
        detail += f"; conclusion: {ds['norm_conclusion'].values}"
    return {"estimate": float(ds[f"norm_{c}_b"].values), "estimate_mcse": float(ds[f"norm_{c}_b_se"].values),
            "verdict": verdict, "detail": detail}


def _sha(ds: xr.Dataset) -> str:
    return str(ds.attrs.get("protocol_sha256", "?"))[:16]


NORM_CHECKS = (
    Check("C5", lambda ds: f"pre-registered rule (protocols/temperature.md, sha256 {_sha(ds)}…): the gap's sensitivity "
          f"S = dG/deps to the negatives' embedding norms (psi = r u_W before normalisation, psi(y_j) -> e^eps psi(y_j)) "
          f"grows as tau falls: one-sided jackknife t test of H0 slope of log E[S] on log tau >= {NORM_B0:.3f} AND "
          f"E[S](tau_min) > 0, each at {NORM_ALPHA:g} (false-failure rate {NORM_BETA:g} = 1 - planned power at the "
          "design alternative, not a guarantee for smaller effects)",
          lambda ds: _norm_eval(ds, "primary"), NORM_BETA, protocol=PROTOCOL_PATH),
    Check("C5", lambda ds: f"pre-registered null control (protocols/temperature.md, sha256 {_sha(ds)}…): the same rule "
          "on S of the fixed reference psi = r x (not trained, E[S] = 0 exactly) must NOT pass",
          lambda ds: _norm_eval(ds, "null"), NORM_ALPHA,
          # the rule passes only if its level test rejects; E[S](tau_min) = 0 exactly for psi = r x, the
          # boundary of H0 E[S] <= 0, so the one-sided p-value is uniform (the slope test of log E[S] has
          # no null distribution when E[S] = 0, and needs none: the level test bounds the rate)
          pvalues=lambda ds: {"level": (float(ds["norm_null_level_p"].values), NORM_ALPHA)},
          protocol=PROTOCOL_PATH),
    Check("C5", lambda ds: f"pre-registered control (protocols/temperature.md, sha256 {_sha(ds)}…): the negatives' norms "
          "changed in a component the score ignores (S = 0 up to rounding); the rule must NOT pass (deterministic)",
          lambda ds: _norm_eval(ds, "ignored"), None, protocol=PROTOCOL_PATH),
)


# ----------------------------------------------------------------------------------------------
# the study

class Temperature(Study):
    name = "temperature"
    claim = "C5"
    title = "Claim C5: temperature as a regulariser, KL(Q || pi) <= 2/tau"
    cell_dim = "cell"
    ademp = {
        "aim": "C5: KL(Q(x,.) || pi) <= 2/tau for every x; small tau inflates the finite-k bias (c1, expansion scale)",
        "data": "uniform pi (d = 3), vMF pi (d = 8) and the vMF mixture of simkit.distributions.designs (d = 16); vMF positive "
                "kernel; phi = identity; tau on a log grid",
        "estimand": "CE(tau), c1(tau), E[Z2/Z^2], per-anchor KL(Q(x,.) || pi) with its mean and maximum over x, "
                    "gap_k at every k of the grid",
        "methods": "exact formulas (simkit.exact, closed-form KL of simkit.distributions.softmax_kernel); Monte Carlo CE and gap_k "
                   "(GapEstimator, control variates); KL by importance sampling from pi and by exact sampling from "
                   "Q(x,.); MCSE over independent blocks (or over draws, per anchor)",
        "performance": "exact KL against 2/tau (deterministic); max_x (KL_hat - z MCSE) against 2/tau; CE t test "
                       "against exact (Bonferroni); monotone expansion scale and |c1| growth below 1/kappa_M; "
                       "looseness KL/(2/tau); MCSE of every estimate (exploratory). Norms clause (confirmatory, "
                       "protocols/temperature.md): G and G tau per tau; sensitivity S = dG/deps of the gap to the "
                       "negatives' embedding norms (psi = r u_W before normalisation); one-sided rule on S with a "
                       "null control and a score-ignored-component control",
    }
    schema = SCHEMA
    checks = CHECKS + NORM_CHECKS
    params = {
        "settings": Param("settings", str, "uniform-d3,vmf-d8,mixture-d16", "comma-separated settings "
                          "(simkit.distributions.designs.RATE_SETTINGS)", choices=tuple(SETTINGS), multi=True,
                          quick="uniform-d3,vmf-d8"),
        "tau_min": Param("tau_min", float, 0.02, "smallest temperature of the log grid", low=TAU_MIN),
        "tau_max": Param("tau_max", float, 10.0, "largest temperature of the log grid", low=TAU_MIN, high=1e4),
        "n_tau": Param("n_tau", int, 14, "number of temperatures on the grid", low=2, high=200, quick=8),
        "k_max": Param("k_max", int, 1024, "negatives per block (power of two); gap_k for k = 1, 2, ..., k_max",
                       low=16, high=1 << 20, power_of_two=True),
        "k_fixed": Param("k_fixed", int, 64, "the smaller fixed k shown beside k_max (a power of two <= k_max)",
                         low=1, high=1 << 20, power_of_two=True),
        "n_blocks": Param("n_blocks", int, 32, "independent replicate blocks per cell", low=4, high=100000,
                          quick=16),
        "block_anchors": Param("block_anchors", int, 256, "InfoNCE anchors per block (sharing its negatives)",
                               low=8, high=1 << 20, quick=128),
        "pilot_blocks": Param("pilot_blocks", int, 2, "pilot blocks for the control-variate coefficients",
                              low=1, high=64),
        "kl_anchors": Param("kl_anchors", int, 8, "KL anchors x ~ pi per block", low=1, high=4096),
        "kl_samples": Param("kl_samples", int, 2048, "draws of y per KL anchor (from pi, and from Q(x,.))",
                            low=16, high=1 << 20, quick=1024),
        "n_mc": Param("n_mc", int, 1 << 14, "Monte Carlo size over x for exact values of mixtures",
                      low=256, high=1 << 24, quick=1 << 13),
        # the norms clause (pre-registered: protocols/temperature.md)
        "norm_taus": Param("norm_taus", float, "1,0.5,0.2,0.1,0.05,0.02", "temperatures of the norms design "
                           "(comma-separated)", quick="1,0.2,0.05", multi=True, min_items=3, low=TAU_MIN, high=100.0,
                           descending=True, items_doc=f"temperatures in [{TAU_MIN:g}, 100]"),
        "norm_blocks": Param("norm_blocks", int, 64, "replicate blocks of the norms design (pre-registered)", low=3,
                             high=100000, quick=24),
        "norm_n": Param("norm_n", int, 256, "training tuples of the norms design", low=8, high=1 << 16, quick=64),
        "norm_k": Param("norm_k", int, 32, "negatives per tuple of the norms design", low=1, high=4096, quick=16),
        "norm_beta": Param("norm_beta", float, 0.5, "amplitude of the norm factor r(x) = exp(beta e_1.x)", low=0.0,
                           high=3.0),
        "norm_kappa_m": Param("norm_kappa_m", float, 10.0, "kernel concentration of the norms design", low=0.5,
                              high=200.0),
        "norm_eval": Param("norm_eval", int, 8192, "fresh tuples per block of the norms design", low=64,
                           high=1 << 22, quick=512),
        "norm_maxiter": Param("norm_maxiter", int, 2000, "L-BFGS-B iteration limit of the norms design", low=10,
                              high=100000, quick=500),
    }

    def check_config(self, cfg):
        if not cfg["tau_min"] < cfg["tau_max"]:
            raise ValueError(f"'tau_min' must be < tau_max = {cfg['tau_max']:g}, got {cfg['tau_min']:g}")
        if cfg["k_fixed"] > cfg["k_max"]:
            raise ValueError(f"'k_fixed' must be <= k_max = {cfg['k_max']}, got {cfg['k_fixed']}")

    def n_blocks(self, cfg):
        return max(int(cfg["n_blocks"]), int(cfg["norm_blocks"]))

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            family, d, kp, km, _ = SETTINGS[name]
            for tau in tau_grid(cfg["tau_min"], cfg["tau_max"], cfg["n_tau"]):
                out.append({"setting": name, "pi": family, "dim": int(d), "kappa_pi": float(kp),
                            "kappa_m": float(km), "tau": tau})
        for tau in self.params["norm_taus"].values(cfg["norm_taus"]):
            out.append({"setting": NORMS_SETTING, "pi": "uniform", "dim": P_NORM, "kappa_pi": 0.0,
                        "kappa_m": float(cfg["norm_kappa_m"]), "tau": float(tau)})
        return out

    def _estimator(self, cell, cfg) -> GapEstimator:
        return GapEstimator(build_pi(cell), VMFKernel(cell["kappa_m"]), cell["tau"], cfg["k_max"])

    def block_dims(self, cfg):
        return {**_RAW, **_NORM_RAW}, {"k": k_grid(cfg["k_max"]), "anchor": np.arange(cfg["kl_anchors"])}

    def prepare(self, cell, cfg, rng):
        """Control-variate pilot, then every exact constant; Monte Carlo (mixtures) from ``rng`` only.
        The norms cells have no constants."""
        if cell["setting"] == NORMS_SETTING:
            return {}
        est = self._estimator(cell, cfg)
        pi, kernel, tau, n_mc = est.pi, est.kernel, est.tau, cfg["n_mc"]
        coef = est.calibrate(cfg["block_anchors"], rng, n_blocks=cfg["pilot_blocks"])
        c1 = _value_se(exact.bias_constant(pi, kernel, tau, n_mc=n_mc, rng=rng))
        ce = _value_se(exact.cross_entropy(pi, kernel, tau, n_mc=n_mc, rng=rng))
        rho, mbar = exact.expansion_scales(pi, kernel, tau, n_mc=n_mc, rng=rng)
        klm = _value_se(exact.expectation(pi, lambda x: kl_q_pi(pi, x, tau), isotropic=True, n_mc=n_mc, rng=rng))
        h = _value_se(entropy_h(pi, cell["kappa_m"], n_mc=n_mc, rng=rng))
        gex = (exact.gap_exact(kernel, pi.dim, tau, est.grid) if isinstance(pi, Uniform)
               else np.full(est.grid.size, np.nan))
        return {"coef": coef, "c1": np.array(c1), "ce": np.array(ce), "rho": np.array(rho), "mbar": np.array(mbar),
                "kl_mean": np.array(klm), "kl_sup": np.array(kl_sup(pi, tau, rng=rng)), "entropy": np.array(h),
                "gap_exact": gex}

    def generate(self, cell, cfg, prep, rng):
        nan = {n: np.full(len(self.block_dims(cfg)[1][dims[0]]) if dims else (), np.nan)
               for n, dims in {**_RAW, **_NORM_RAW}.items()}
        if cell["setting"] == NORMS_SETTING:
            return {**nan, **_norm_generate(cell, cfg, rng)}
        key = getattr(getattr(rng.bit_generator, "seed_seq", None), "spawn_key", ())
        if len(key) >= 2 and key[-2] == 1 and key[-1] >= cfg["n_blocks"]:
            return nan  # a block beyond n_blocks, run only for the norms design (norm_blocks > n_blocks)
        nan = {n: v for n, v in nan.items() if n in _NORM_RAW}
        est = self._estimator(cell, cfg)
        out = est.block(cfg["block_anchors"], rng, prep["coef"])
        pi, tau = est.pi, est.tau
        x = pi.rvs(cfg["kl_anchors"], rng=rng)
        y = pi.rvs(cfg["kl_samples"], rng=rng)
        kl_is, kl_is_se, ess = kl_importance(pi, x, y, tau)
        kl_q, kl_q_se = kl_direct(pi, x, sample_q(pi, x, tau, cfg["kl_samples"], rng=rng), tau)
        return {"gap_cv": out["gap_cv"], "gap_plain": out["gap_plain"], "loss": out["loss"],
                "ell_inf": out["ell_inf"], "kl_exact": kl_q_pi(pi, x, tau), "kl_q": kl_q, "kl_q_mcse": kl_q_se,
                "kl_is": kl_is, "kl_is_mcse": kl_is_se, "kl_is_ess": ess, **nan}

    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        """The raw cells laid out over (setting, tau), the summaries with their MCSE, and the verdicts; the
        norms cells over (tau_n, norm_block) with their summaries, rules and verdicts."""
        is_norm = raw["setting"].values.astype(str) == NORMS_SETTING
        norm_raw = raw.isel({raw["setting"].dims[0]: np.flatnonzero(is_norm),
                             "block": slice(0, int(cfg["norm_blocks"]))})
        raw = raw.isel({raw["setting"].dims[0]: np.flatnonzero(~is_norm), "block": slice(0, int(cfg["n_blocks"]))})
        norm_taus = np.array(self.params["norm_taus"].values(cfg["norm_taus"]))
        settings = cfg["settings"].split(",")
        taus = np.array(tau_grid(cfg["tau_min"], cfg["tau_max"], cfg["n_tau"]))
        k = raw["k"].values
        n_set, n_tau = len(settings), taus.size
        shapes = {"prep_coef": (k.size, len(CV_TERMS)), "prep_gap_exact": (k.size,),
                  **{f"prep_{n}": s for n, s in _PREP.items()}}
        grid = _grid(raw, n_set, n_tau, shapes)
        crit = critical_values(cfg)
        ds = xr.Dataset(coords={"setting": np.array(settings), "tau": taus, "block": raw["block"].values, "k": k,
                                "anchor": raw["anchor"].values, "cv_term": np.array(CV_TERMS)})
        for key in ("pi", "dim", "kappa_pi", "kappa_m"):
            ds.coords[key] = ("setting", grid(key)[:, 0])
        for n, dims in _RAW.items():
            ds[f"raw_{n}"] = ((*STB, *dims), grid(f"raw_{n}"))
        ds["prep_coef"] = ((*STK, "cv_term"), grid("prep_coef"))
        ds["cell_error"] = (ST, grid("cell_error").astype(str))
        ds["cell_key"] = ((*ST, "key_word"), grid("cell_key"))

        p = {n: grid(f"prep_{n}") for n in (*_PREP, "gap_exact")}
        blocks = {n: grid(f"raw_{n}") for n in _RAW}
        out = {**_ce_summary(blocks["ell_inf"], p["ce"], p["entropy"]), **_bias_summary(p, taus),
               **_kl_summary(blocks, p, 2.0 / taus, crit["kl"]), **_gap_summary(blocks, p["gap_exact"], k)}
        rows = [_setting_verdicts(i, out, blocks["kl_exact"].reshape(n_set, n_tau, -1), ds["cell_error"].values, taus,
                                  float(ds["kappa_m"].values[i]), int(ds["dim"].values[i]), crit)
                for i in range(n_set)]
        for name in rows[0]:
            out[name] = np.array([r[name] for r in rows])
        ds.coords["tau_n"] = ("tau_n", norm_taus)
        ds.coords["norm_block"] = ("norm_block", np.arange(int(cfg["norm_blocks"])))
        out.update(_norm_summary(norm_raw, norm_taus, int(cfg["norm_blocks"])))
        r = NormProfile.axis(cfg["norm_beta"], P_NORM).r_max
        out["norm_r_min"], out["norm_r_max"] = 1.0 / r, r
        for name, value in out.items():
            ds[name] = (SCHEMA[name].dims, value)
        return ds

    def attrs(self, cfg):
        crit = critical_values(cfg)
        return {"alpha": ALPHA, "z_ce": crit["ce"], "z_kl": crit["kl"], "z_c1": crit["c1"],
                "ess_reliable": ESS_RELIABLE, "k_onset_factor": K_ONSET_FACTOR, "norm_alpha": NORM_ALPHA,
                "norm_b0": NORM_B0, "norm_beta_rate": NORM_BETA, "norm_fd_step": FD_STEP,
                "norm_seed_split": NORM_SEED_SPLIT, **protocol_attrs(PROTOCOL_PATH),
                "analysis": ("norms clause confirmatory (protocols/temperature.md); KL, CE and c1 checks exploratory"
                             if not cfg.get("quick") else "quick (CI) design: not the confirmatory run")}

    def report_sections(self, doc, ds):
        from simkit.report.temperature import temperature_sections
        temperature_sections(doc, ds)

    def summary_text(self, ds) -> str:
        return "\n".join([self._kl_summary_text(ds), self._norm_summary_text(ds)])

    @staticmethod
    def _norm_summary_text(ds) -> str:
        lines = [f"norms clause (psi = r u_W, r in [{float(ds['norm_r_min'].values):.3g}, "
                 f"{float(ds['norm_r_max'].values):.3g}]; {ds.sizes['norm_block']} blocks)",
                 f"{'tau':>8}{'G ± MCSE':>22}{'G·tau ± MCSE':>22}{'S ± MCSE':>22}{'S·tau ± MCSE':>22}"
                 f"{'S null ± MCSE':>22}{'S ignored':>11}{'FD rel err':>11}"]
        for j, t in enumerate(ds["tau_n"].values):
            pm = lambda n: f"{float(ds[n].values[j]):>11.4g} ± {float(ds[n + '_mcse'].values[j]):<8.2g}"  # noqa: E731
            lines.append(f"{t:>8.4g}{pm('norm_gap_cv')}{pm('norm_gap_tau')}{pm('norm_sens_cv')}{pm('norm_sens_tau')}"
                         f"{pm('norm_sens_ref')}{float(ds['norm_sens_ignored'].values[j]):>11.2g}"
                         f"{float(ds['norm_fd_rel_error'].values[j]):>11.2g}")
        lines.append(f"slope of log E[G] on log tau: {float(ds['norm_gap_slope'].values):.3f} ± "
                     f"{float(ds['norm_gap_slope_se'].values):.3f}")
        for c in NORM_CONTROLS:
            lines.append(f"{_RULE_NAMES[c]}: {_norm_rule_text(ds, c)}")
        lines.append(f"verdicts: primary {ds['norm_verdict'].values}, null control {ds['norm_null_verdict'].values}, "
                     f"ignored-component control {ds['norm_ignored_verdict'].values} -> {ds['norm_conclusion'].values}")
        return "\n".join(lines)

    @staticmethod
    def _kl_summary_text(ds) -> str:
        k = ds["k"].values
        kf = _k_fixed(ds)
        g1, g2 = int(np.nonzero(k == kf)[0][0]), k.size - 1
        lines = []
        for i, s in enumerate(ds["setting"].values):
            lines.append(f"{s}: KL check {ds['verdict_kl'].values[i]}, CE check {ds['verdict_ce'].values[i]}, "
                         f"c1 check {ds['verdict_c1'].values[i]}")
            lines.append(f"{'tau':>8}{'CE exact':>11}{'CE MC ± MCSE':>20}{'z':>7}{'c1 exact':>12}{'E[Z2/Z²]':>11}"
                         f"{'KL max ± MCSE':>20}{'2/tau':>9}{f'{kf}·gap':>18}{f'{int(k[-1])}·gap':>20}")
            for j, t in enumerate(ds["tau"].values):
                v = lambda n: float(ds[n].values[i, j])  # noqa: E731
                lines.append(
                    f"{t:>8.4g}{v('ce_exact'):>11.4f}{v('ce_estimate'):>11.4f} ± {v('ce_estimate_mcse'):<6.4f}"
                    f"{v('ce_z'):>+7.2f}{v('c1_exact'):>12.4g}{v('z2_ratio'):>11.4g}"
                    f"{v('kl_max'):>11.4g} ± {v('kl_max_mcse'):<6.2g}{float(ds['kl_bound'].values[j]):>9.3g}"
                    f"{float(ds['k_gap'].values[i, j, g1]):>10.4g} ± {float(ds['k_gap_mcse'].values[i, j, g1]):<6.2g}"
                    f"{float(ds['k_gap'].values[i, j, g2]):>11.4g} ± {float(ds['k_gap_mcse'].values[i, j, g2]):<6.2g}")
        return "\n".join(lines)


def _k_fixed(ds: xr.Dataset) -> int:
    """The configured k_fixed (from the dataset's configuration), else 64 or the largest k."""
    try:
        kf = int(json.loads(ds.attrs.get("config", "{}")).get("k_fixed", 64))
    except (ValueError, TypeError):
        kf = 64
    k = ds["k"].values
    return kf if kf in k else int(k[min(len(k) - 1, 6)])


STUDY = Temperature()
