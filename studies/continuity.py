"""Claim C4: loss differences are controlled by softmax *averages* over the negatives, not their max.

Pre-registered in ``protocols/continuity.md`` (committed alone before the confirmatory run; its path, SHA-256
and commit are global attributes of the dataset). The two-sided test of "slope of log E B_avg on log k = 0"
that preceded the protocol stays, unchanged in meaning, as an exploratory check and per-cell ``flat_verdict``.

For pairs (phi, psi) of embeddings (psi = phi moved by eps along a random direction, or, in "bump-d16",
displaced only on a cap of pi-mass 2^-6 so that rare negatives move a lot), the study evaluates per tuple
and k the loss difference |l_k(psi) - l_k(phi)|, the averaging bound B_avg and the max bound B_max of
docs/theory.md section 12 (both proved, so checked on every tuple), and tests how their means scale in k:
the primary rule is a one-sided non-inferiority test that E B_avg does not grow (OLS slope of log2 E B_avg
on log2 k, jackknife SE), with positive controls (the negatives' max, B_max in the bump cells) that must
not pass it. The ADEMP statement is the class attribute ``Continuity.ademp`` (stored in the dataset); the
full design and the derivation of the bounds: docs/design.md, "studies/continuity".

Run it: ``simkit run continuity`` (or ``python -m simkit run continuity``).
"""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import xarray as xr

from simkit import VMFKernel
from simkit.stats.analysis import mean_mcse, ratio_of_means
from simkit.stats import bound_growth as bg
from simkit.stats.trend import DETECT_POWER, wls_slope_test
from simkit.distributions.designs import MIXTURE_SEED, MIXTURE_WEIGHTS, build_pi
from simkit.embeddings.embedding import family_embedding
from simkit.embeddings.perturbation import CapBump, perturb
from simkit.estimators.loss_difference import MEANS, loss_difference_means
from simkit.exact.loss_bounds import TOL_ABS, TOL_REL
from simkit.estimators.infonce import k_grid
from simkit.claims.protocol import protocol_attrs
from simkit.runner import Check, Param, Study, Var, recorded_sha

__all__ = ["SETTINGS", "SCHEMA", "STUDY", "ALPHA", "ALPHA_NI", "DELTA", "B0", "PROTOCOL_PATH", "confirmatory_verdicts"]

#: level of each exploratory per-(setting, eps) test (flatness two-sided, growth one-sided): the
#: pre-protocol check, unchanged
ALPHA = 1e-3
#: the pre-registered rule (protocols/continuity.md): one-sided level per cell, margin per doubling of k
PROTOCOL_PATH = "protocols/continuity.md"
ALPHA_NI = 0.01
DELTA = 0.01
#: the margin on the slope scale: b0 = log2(1 + DELTA)
B0 = math.log2(1.0 + DELTA)
#: anchors processed at once (bounds memory: chunk x K x d floats per array)
_CHUNK = 8

#: name -> (embedding family, p, d, hidden width, pi family, kappa_pi, kappa_M, tau, perturbation, cap fraction);
#: perturbation "params": psi = phi with parameters moved (simkit.embeddings.perturbation.perturb); "bump": psi =
#: phi plus a bump on a spherical cap of the input sphere holding the given fraction of pi's mass (CapBump)
SETTINGS = {
    "twolayer-d16": ("two_layer", 16, 16, 32, "uniform", 0.0, 20.0, 0.5, "params", 0.0),
    "linear-d16": ("linear", 16, 16, 0, "mixture", 6.0, 20.0, 0.5, "params", 0.0),
    "bump-d16": ("two_layer", 3, 16, 32, "uniform", 0.0, 20.0, 0.5, "bump", 2.0 ** -6),
}
#: bump amplitude a = BUMP_GAIN * eps (eps = 0.5: a = 2, a displacement 2 sin(atan(2)/2) = 1.05 at the cap centre)
BUMP_GAIN = 4.0

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
    "tight_score": "largest (|dl| - rounding allowance)_+ / B_score over the block's tuples",
    "tight_avg": "largest (|dl| - rounding allowance)_+ / B_avg over the block's tuples",
    "tight_max": "largest (|dl| - rounding allowance)_+ / B_max over the block's tuples",
}
_E = ("eps",)
BLOCK_VARS_E = {
    "anchor_term": "mean of 2 |phi(x) - psi(x)| + |phi(x+) - psi(x+)|",
    "neg_plain": "mean over all K negatives of |phi(x-) - psi(x-)| (unweighted)",
    "param_dist": "size of the perturbation: ||theta_psi - theta_phi|| (= eps ||theta_phi||) for a parametric "
                  "setting; ||psi(c) - phi(c)|| at the cap centre c (= 2 sin(atan(BUMP_GAIN eps)/2)) for a bump",
}


# ----------------------------------------------------------------------------------------------
# the dataset's variables

S, SE, SEK, SBE, SBEK = ("setting",), ("setting", "eps"), ("setting", "eps", "k"), ("setting", "block", "eps"), \
    ("setting", "block", "eps", "k")
NATS = "in nats (dimensionless, udunits '1')"
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
#: quantities put through the non-inferiority rule: name -> (per-block variable, role)
NI_QUANTITIES = {"avg": ("bound_avg", "primary: E B_avg"),
                 "negmax": ("neg_max", "positive control in every cell: E max_j |dw_j|"),
                 "max": ("bound_max", "positive control in the bump cells, descriptive elsewhere: E B_max"),
                 "negavg": ("neg_avg", "descriptive: E softmax average of |dw|")}


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
            f"slope_{name}_mde": Var(SE, f"smallest slope detected with probability {DETECT_POWER:g} ({text})", "1",
                                     f"(critical t at level {ALPHA:g} + t_{DETECT_POWER:g}) times the SE, n_blocks - "
                                     "1 df (simkit.stats.trend.detectable_t)")}


def _ni_vars(q: str, role: str) -> dict:
    text = role.split(": ", 1)[1]
    pre = f"ni_{q}"
    desc = f"{role} (protocols/continuity.md); OLS over k >= k_fit_min, equal weights, block-mean curve"
    return {f"{pre}_b": Var(SE, f"OLS slope of log2 {text} on log2 k", "1", desc),
            f"{pre}_b_se": Var(SE, f"jackknife SE of {pre}_b", "1", "delete-one-block jackknife"),
            f"{pre}_growth": Var(SE, f"growth of {text} per doubling of k", "1", f"2^{pre}_b - 1"),
            f"{pre}_growth_se": Var(SE, f"SE of {pre}_growth", "1", "delta method: ln 2 * 2^b * SE(b)"),
            f"{pre}_t": Var(SE, f"non-inferiority t statistic for {text}", "1", f"({pre}_b - log2(1 + delta)) / SE"),
            f"{pre}_p": Var(SE, f"non-inferiority p-value for {text}", "1", "one-sided, H0: growth >= delta per "
                            "doubling of k; Student t with n_blocks - 1 df")}


#: every variable and coordinate of the dataset (the runner adds block, cell_error and cell_key)
SCHEMA = {
    "setting": Var(S, "design setting", "1", "name in studies/continuity.py SETTINGS"),
    "family": Var(S, "embedding family", "1", "linear: Wx/|Wx|; two_layer: normalize(W2 tanh(W1 x + b1))"),
    "p": Var(S, "input dimension p", "1", "points on S^{p-1}"),
    "d": Var(S, "embedding dimension d", "1", "S^{d-1}"),
    "hidden": Var(S, "hidden width m", "1", "0 for the linear family"),
    "pi": Var(S, "data distribution family", "1", f"uniform or mixture (simkit.distributions.designs: weights {MIXTURE_WEIGHTS}, "
              f"means from seed {MIXTURE_SEED})"),
    "kappa_pi": Var(S, "concentration of pi", "1", "vMF concentration of each mixture component"),
    "kappa_m": Var(S, "kernel concentration kappa_M", "1", "x+ ~ vMF(x, kappa_M)"),
    "perturbation": Var(S, "kind of perturbation psi of phi", "1", "params: parameters moved by eps ||theta|| "
                        "(perturb); bump: psi = normalise(phi + BUMP_GAIN eps b(x) e), b a bump on a cap (CapBump)"),
    "cap_fraction": Var(S, "pi-mass of the bump's cap", "1", "fraction of the uniform measure on S^{p-1} in the cap "
                        "(0 for a parametric perturbation)"),
    "tau": Var(S, "temperature tau", "1", "s(x, y) = phi(x).phi(y)/tau"),
    "eps": Var(("eps",), "relative parameter perturbation eps", "1", "theta_psi = theta_phi + eps ||theta_phi|| e"),
    "k": Var(("k",), "number of negatives k", "1", "geometric grid 1, 2, 4, ..., k_max; the first k of K negatives"),
    **{f"raw_{n}": Var(SBEK, f"per-block {n}{', in nats' if _in_nats(n) else ''}", "1",
                       text + (f"; {NATS}" if _in_nats(n) else "")) for n, text in BLOCK_VARS.items()},
    **{f"raw_{n}": Var(SBE, f"per-block {n}", "1", text) for n, text in BLOCK_VARS_E.items()},
    **{k: v for n in MEANS for k, v in _mean_var(n, SEK, BLOCK_VARS[n]).items()},
    **{k: v for n, text in BLOCK_VARS_E.items() for k, v in _mean_var(n, SE, text).items()},
    **{f"violations_{t}": Var(SEK, f"tuples violating B_{t}", "1", "count over all blocks (attrs['tuples_per_k'] "
                              "tuples per k and eps)") for t in ("score", "avg", "max")},
    **{f"tightness_{t}": Var(SEK, f"largest |dl| / B_{t} over tuples", "1", "(|dl| - rounding allowance)_+ / B_t: at "
                             "most 1 exactly when the bound holds; near 1: tight on some tuple")
       for t in ("score", "avg", "max")},
    **{k: v for name, (_, _, ln) in RATIOS.items() for k, v in {
        name: Var(SEK, ln, "1", "ratio of means over tuples and blocks"),
        f"{name}_mcse": Var(SEK, f"MCSE of {name}", "1", "delete-one-block jackknife")}.items()},
    **{k: v for name, (_, text) in SLOPES.items() for k, v in _slope_vars(name, text).items()},
    "flat_verdict": Var(SE, "exploratory (pre-protocol) verdict for C4", "1",
                        f"pass when no tuple violates any bound, the two-sided test of zero WLS slope for B_avg is not "
                        f"rejected at {ALPHA:g} and the one-sided test of positive WLS slope for B_max rejects at "
                        f"{ALPHA:g}; error when a task failed"),
    "flat_reason": Var(SE, "why a cell failed the exploratory rule", "1", "empty when it passed"),
    **{k: v for q, (var, role) in NI_QUANTITIES.items() for k, v in _ni_vars(q, role).items()},
    "ni_blocks": Var(SE, "blocks in the non-inferiority tests", "1", "finished blocks (df = n - 1)"),
    **{k: v for name, text in (("s1", "log2 E B_max"), ("s2", "log2 (E B_max / E B_avg)")) for k, v in {
        f"{name}_b": Var(SE, f"OLS slope of {text} on log2 k", "1", "secondary (protocols/continuity.md section 8); "
                         "k >= k_fit_min, equal weights, block-mean curves"),
        f"{name}_b_se": Var(SE, f"jackknife SE of {name}_b", "1", "delete-one-block jackknife"),
        f"{name}_t": Var(SE, f"t statistic of {name}_b", "1", f"{name}_b / {name}_b_se"),
        f"{name}_p": Var(SE, f"one-sided p-value for {name}_b > 0", "1", "Student t with n_blocks - 1 df, H0: slope "
                         "<= 0")}.items()},
    "verdict": Var(SE, "confirmatory primary verdict for C4 per cell", "1",
                   f"protocols/continuity.md: pass when the one-sided non-inferiority test of E B_avg against growth "
                   f">= {100 * DELTA:g}% per doubling of k rejects at {ALPHA_NI:g}; error when a task failed"),
    "verdict_reason": Var(SE, "why a cell failed the primary rule", "1", "empty when it passed"),
    "control_verdict": Var(SE, "positive-control verdict per cell", "1",
                           "pass when E max_j |dw_j| (every cell) and E B_max (bump cells) do NOT pass the same rule"),
    "control_reason": Var(SE, "why the control failed in a cell", "1", "empty when it passed"),
    "secondary_verdict": Var(SE, "secondary verdict per cell", "1", f"pass when S1 (B_max grows) and S2 (E B_max / "
                             f"E B_avg grows) both reject H0: slope <= 0 at {ALPHA_NI:g}"),
    "secondary_reason": Var(SE, "why the secondary failed in a cell", "1", "empty when it passed"),
    "conclusion": Var((), "C4 confirmatory conclusion", "1", "protocols/continuity.md section 7: confirmed, or not "
                      "confirmed with the reason"),
}


# the rule (simkit.stats.bound_growth at the protocol's levels)
confirmatory_verdicts = partial(bg.confirmatory_verdicts, alpha_ni=ALPHA_NI, delta=DELTA)
_slope_problems = partial(bg.slope_problems, alpha=ALPHA)


def _n_cells(ds) -> int:
    return ds.sizes["setting"] * ds.sizes["eps"]


CHECKS = (
    Check("C4", lambda ds: f"deterministic check (protocols/continuity.md 7.1, sha256 {recorded_sha(ds)}…): no tuple violates "
                           f"B_score, B_avg or B_max at any k (proved bounds, also for the non-parametric bump psi; "
                           f"rounding allowance {TOL_ABS:g} + {TOL_REL:g} |l_k|), {_n_cells(ds)} (setting, eps) cells; "
                           f"estimate: the number of violations",
          bg.bounds_check, None, protocol=PROTOCOL_PATH),
    Check("C4", lambda ds: f"pre-registered primary (protocols/continuity.md 7.2, sha256 {recorded_sha(ds)}…): per (setting, eps), "
                           f"{_n_cells(ds)} cells, one-sided non-inferiority t test of H0: E B_avg grows by >= "
                           f"{100 * DELTA:g}% per doubling of k (OLS slope of log2 E B_avg on log2 k, jackknife SE) at "
                           f"{ALPHA_NI:g}; intersection-union (all cells must reject); estimate: the largest growth; "
                           f"stated rate: P(fail | flat in every cell) with the run's SEs",
          bg.primary_check, partial(bg.primary_rate, delta=DELTA, alpha=ALPHA_NI), protocol=PROTOCOL_PATH,
          label="pre-registered primary: growth of E B_avg per doubling of k"),
    Check("C4", lambda ds: f"pre-registered positive control (protocols/continuity.md 7.3, sha256 {recorded_sha(ds)}…): the same "
                           f"rule on E max_j |dw_j| (every cell) and on E B_max (bump cells) must NOT show growth < "
                           f"{100 * DELTA:g}% per doubling; estimate: the smallest control growth; stated rate: "
                           f"1 - (1 - {ALPHA_NI:g})^n over the n control tests (at the margin)",
          bg.control_check, partial(bg.control_rate, alpha=ALPHA_NI), protocol=PROTOCOL_PATH,
          label="pre-registered positive control: growth of E max_j |dw_j| and E B_max"),
    Check("C4", lambda ds: f"pre-registered secondary (protocols/continuity.md 8, sha256 {recorded_sha(ds)}…): S1 E B_max and S2 "
                           f"E B_max / E B_avg grow with k (one-sided t of OLS slope > 0 at {ALPHA_NI:g}) in all "
                           f"{_n_cells(ds)} cells; estimate: the smallest S2 slope; tests that must reject: their "
                           f"miss rate is 1 - power and is not stated",
          bg.secondary_check, None, protocol=PROTOCOL_PATH,
          label="pre-registered secondary: growth of E B_max and E B_max / E B_avg"),
    Check("C4", lambda ds: f"exploratory (pre-protocol rule, unchanged): per (setting, eps), {_n_cells(ds)} cells: WLS "
                           f"slope of log E B_avg on log k = 0 not rejected (two-sided, {ALPHA:g}); WLS slope of log "
                           f"E B_max > 0 detected (one-sided, {ALPHA:g})",
          partial(bg.slopes_check, alpha=ALPHA), lambda ds: 1.0 - (1.0 - ALPHA) ** _n_cells(ds),
          partial(bg.flat_pvalues, alpha=ALPHA)),
)


#: the design of protocols/continuity.md section 4 (the study's defaults)
REGISTERED = {"settings": "twolayer-d16,linear-d16,bump-d16", "eps": "0.01,0.1,0.5", "k_max": 4096, "k_fit_min": 16,
              "n_blocks": 128, "block_anchors": 32, "tau": None, "seed": 20261203}


def registered_design(cfg: dict) -> bool:
    """True for the pre-registered design (full, the protocol's seed and parameters): only its dataset records
    the protocol (``protocol_path``, ...), so that any other run's claim rows are labelled exploratory."""
    return not cfg.get("quick") and all(cfg.get(k) == v for k, v in REGISTERED.items())


# ----------------------------------------------------------------------------------------------
# the study

class Continuity(Study):
    name = "continuity"
    claim = "C4"
    title = "Claim C4: softmax averages, not maxima, bound InfoNCE loss differences"
    cell_dim = "setting"
    schema = SCHEMA
    checks = CHECKS
    #: the confirmatory seed of protocols/continuity.md (earlier runs: 20261130, the house default)
    default_seed = 20261203
    ademp = {
        "aim": "C4 (Prop. 4): |l_k(phi) - l_k(psi)| is bounded by a softmax-weighted average of "
               "||phi(x-_i) - psi(x-_i)|| over the negatives (does not grow with k); the Lipschitz bound with the max "
               f"grows with k. Pre-registered (protocols/continuity.md): one-sided non-inferiority, H0: E B_avg grows "
               f"by >= {100 * DELTA:g}% per doubling of k, in every (setting, eps) cell",
        "data": "pairs (phi, psi): psi = phi with parameters moved by eps ||theta|| in a random direction (two-layer "
                "tanh embedding d = 16 with uniform pi, linear embedding d = 16 with a vMF mixture pi), or psi = phi "
                "plus a bump on a spherical cap of pi-mass 2^-6 (two-layer tanh S^2 -> S^15, uniform pi: only rare "
                "negatives displaced); vMF positives; K i.i.d. negatives per tuple, every k = 1, 2, ..., K from the "
                "first k (common random numbers)",
        "estimand": "per tuple |dl|, B_avg, B_max; their means over tuples and pairs as functions of k; ratios of "
                    "means",
        "methods": "exact per-tuple evaluation with running log-sum-exp; WLS slope of log mean bound on log k over "
                   "k >= k_fit_min with delete-one-block jackknife SE; ratios with jackknife MCSE",
        "performance": "violations on every tuple (must be 0); primary one-sided non-inferiority t test of the OLS "
                       "slope of log2 E B_avg on log2 k against log2(1 + delta), jackknife SE, intersection-union over "
                       "cells; positive controls (negatives' max, B_max in the bump cells) through the same rule; "
                       "secondary one-sided growth of B_max and of E B_max / E B_avg; exploratory two-sided WLS test "
                       "of zero slope for B_avg; MCSE of every mean and ratio",
    }
    params = {
        "settings": Param("settings", str, "twolayer-d16,linear-d16,bump-d16", "comma-separated settings",
                          choices=tuple(SETTINGS), multi=True),
        "eps": Param("eps", float, "0.01,0.1,0.5", "comma-separated relative parameter perturbations eps in (0, 1]",
                     multi=True, low=0.0, low_open=True, high=1.0, items_doc="numbers in (0, 1]"),
        "k_max": Param("k_max", int, 4096, "negatives per tuple K (power of two); grid k = 1, 2, 4, ..., K",
                       low=16, high=1 << 16, power_of_two=True, quick=2048),
        "k_fit_min": Param("k_fit_min", int, 16, "smallest k in the slope fits (power of two)", low=1,
                           high=1 << 16, power_of_two=True),
        "n_blocks": Param("n_blocks", int, 128, "independent replicate blocks (a fresh pair phi, psi each; "
                          "pre-registered: protocols/continuity.md)", low=4, high=100000, quick=16),
        "block_anchors": Param("block_anchors", int, 32, "tuples per block", low=1, high=1 << 16, quick=16),
        "tau": Param("tau", float, None, "override the temperature of every setting", low=0.01),
    }

    def check_config(self, cfg):
        if cfg["k_fit_min"] * 8 > cfg["k_max"]:
            raise ValueError(f"'k_fit_min' must be <= k_max / 8 = {cfg['k_max'] // 8} (at least 4 grid points in "
                             f"the fit), got {cfg['k_fit_min']}")

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            fam, p, d, m, pi, kp, km, tau, pert, frac = SETTINGS[name]
            out.append({"setting": name, "family": fam, "p": p, "d": d, "hidden": m, "pi": pi, "kappa_pi": kp,
                        "kappa_m": km, "tau": float(cfg["tau"] if cfg["tau"] is not None else tau),
                        "perturbation": pert, "cap_fraction": float(frac)})
        return out

    def block_dims(self, cfg):
        dims = {name: _EK for name in BLOCK_VARS}
        dims.update({name: _E for name in BLOCK_VARS_E})
        return dims, {"eps": np.array(self.params["eps"].values(cfg["eps"])), "k": k_grid(cfg["k_max"])}

    def generate(self, cell, cfg, prep, rng):
        """One block: a pair per eps (phi shared), block_anchors tuples with K negatives each.

        Draw order: phi, the perturbation (one parameter direction per eps; or, for a bump, the cap
        centre and the direction e shared by every eps), anchors, positives, then the negatives chunk by chunk.
        """
        eps = self.params["eps"].values(cfg["eps"])
        K, N, tau = cfg["k_max"], cfg["block_anchors"], cell["tau"]
        ks = k_grid(K)
        pi = build_pi({"pi": cell["pi"], "dim": cell["p"], "kappa_pi": cell["kappa_pi"]})
        kernel = VMFKernel(cell["kappa_m"])
        phi = family_embedding(cell["family"], cell["p"], cell["d"], cell["hidden"], rng=rng)
        if cell["perturbation"] == "bump":
            psis = CapBump.random(phi, cell["p"], cell["cap_fraction"], [BUMP_GAIN * e for e in eps], rng=rng)
        else:
            psis = [perturb(phi, e, rng=rng) for e in eps]
        x = pi.rvs(N, rng=rng)
        xp = kernel.sample(x, rng=rng)
        out = loss_difference_means(phi, psis, x, xp, lambda n: pi.rvs(n, rng=rng), K, tau, ks, chunk=_CHUNK)
        if cell["perturbation"] == "bump":  # the displacement at the cap centre
            out["param_dist"] = np.array([np.linalg.norm(psi(psi.centre[None, :]) - phi(psi.centre[None, :]))
                                          for psi in psis])
        else:
            out["param_dist"] = np.array([np.linalg.norm(psi.params - phi.params) for psi in psis])
        return out

    def summarise(self, raw: xr.Dataset, cfg) -> dict:
        """Means and ratios with their MCSE, violation counts, slope fits and the verdict per (setting, eps)."""
        k = raw["k"].values.astype(float)
        n_set, n_eps = raw.sizes["setting"], raw.sizes["eps"]
        blocks = {n: raw[f"raw_{n}"].values for n in (*BLOCK_VARS, *BLOCK_VARS_E)}
        out = {}
        for name in (*MEANS, *BLOCK_VARS_E):
            out[name], out[f"{name}_mcse"] = mean_mcse(blocks[name], axis=1)
        for t in ("score", "avg", "max"):
            out[f"violations_{t}"] = np.nansum(blocks[f"viol_{t}"], axis=1)
            tight = blocks[f"tight_{t}"]
            out[f"tightness_{t}"] = (np.nanmax(tight, axis=1) if np.isfinite(tight).any()
                                     else np.full(tight.shape[:1] + tight.shape[2:], np.nan))
        for name, (num, den, _) in RATIOS.items():
            pairs = [[ratio_of_means(blocks[num][s, :, e], blocks[den][s, :, e]) for e in range(n_eps)]
                     for s in range(n_set)]
            out[name] = np.array([[p[0] for p in row] for row in pairs])
            out[f"{name}_mcse"] = np.array([[p[1] for p in row] for row in pairs])
        for name, (var, _) in SLOPES.items():
            fits = np.array([[wls_slope_test(k, blocks[var][s, :, e], cfg["k_fit_min"], alpha=ALPHA,
                                             one_sided=name in _ONE_SIDED)
                              for e in range(n_eps)] for s in range(n_set)])
            for i, suffix in enumerate(("", "_se", "_p", "_mde")):
                out[f"slope_{name}{suffix}"] = fits[..., i]
        errors = [str(e) for e in raw["cell_error"].values]
        cells = [[bg.cell_verdict({t: int(out[f"violations_{t}"][s, e].sum()) for t in ("avg", "max", "score")},
                                  _slope_problems(out["slope_avg_p"][s, e], out["slope_max_p"][s, e],
                                                  out["slope_avg"][s, e], out["slope_max"][s, e]),
                                  errors[s])
                  for e in range(n_eps)] for s in range(n_set)]
        out["flat_verdict"] = np.array([[c[0] for c in row] for row in cells])
        out["flat_reason"] = np.array([[c[1] for c in row] for row in cells])
        # the pre-registered rule: OLS slopes of log2 block-mean curves on log2 k, jackknife SE
        out.update(bg.ni_columns(blocks, NI_QUANTITIES, k, cfg["k_fit_min"], delta=DELTA, alpha=ALPHA_NI))
        out.update(bg.secondary_columns(blocks, k, cfg["k_fit_min"], alpha=ALPHA_NI))
        ver = confirmatory_verdicts(out, raw["setting"].values, raw["perturbation"].values, errors)
        for name, value in ver.items():
            out[name] = np.asarray(value, dtype=str)
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, "alpha_ni": ALPHA_NI, "delta": DELTA, "b0": B0, "bump_gain": BUMP_GAIN,
                "tolerance": f"|dl| > B + {TOL_ABS:g} + {TOL_REL:g} |l_k| counts as a violation",
                "tuples_per_k": int(cfg["n_blocks"] * cfg["block_anchors"]),
                **(protocol_attrs(PROTOCOL_PATH) if registered_design(cfg) else {}),
                "analysis": "confirmatory (the design of protocols/continuity.md)" if registered_design(cfg) else
                            "exploratory: not the pre-registered design (quick, another seed or other parameters)"}


STUDY = Continuity()
