"""Claim C5: temperature as a regulariser -- KL(Q(x,.) || pi) <= 2/tau, small tau inflates the bias, and
the gap becomes sensitive to the norms of the negatives' embeddings (pre-registered, protocols/temperature.md).

Over the C1 catalogue's settings and a log grid of tau: CE, c1, the expansion scales and the per-anchor
KL(Q(x,.) || pi), exact where possible and by Monte Carlo with MCSE (simkit.stats.temperature); every exact
KL against 2/tau (deterministic), CE Monte Carlo against exact, the growth of E[Z2/Z^2] and |c1| as tau falls.
Norms clause (confirmatory; simkit.estimators.norms, docs/theory.md section 14): for psi = r u_W the gap's
sensitivity S = dG/deps to the negatives' norms must grow as tau falls while its two controls do not pass;
and tau S must grow, beyond the 1/tau score scale (protocols/temperature_scaled.md; simkit.stats.temperature_scaled).
ADEMP: ``Temperature.ademp``; docs/design.md, "studies/temperature". Run: ``simkit run temperature``.
"""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from simkit import VMFKernel
from simkit.claims.protocol import protocol_attrs
from simkit.distributions.designs import MIXTURE_SEED, MIXTURE_WEIGHTS, RATE_SETTINGS, build_pi
from simkit.distributions.softmax_kernel import kl_estimates
from simkit.estimators.infonce import TAU_MIN, GapEstimator, k_grid
from simkit.estimators.norms import FD_STEP, NORM_BLOCK_STATS, NormProfile, norm_block
from simkit.exact.divergence import temperature_constants
from simkit.runner import (Check, Param, Study, Var, block_of, cell_grid, common_seeds, dataset_config,
                           estimate_table, recorded_sha, verdict)
from simkit.runner.run import ENGINE_SCHEMA
from simkit.stats.temperature import (NORM_RULE_NAMES, bias_summary, c1_check, ce_check, ce_pvalues, ce_summary,
                                      gap_summary, kl_exact_check, kl_mc_check, kl_summary, norm_schema, norm_summary,
                                      norm_verdicts, setting_rules, summary_schema, tau_grid)
from simkit.stats.temperature import critical_values as _critical_values
from simkit.stats.temperature_scaled import planned_miss_rate, rule_check, scaled_schema, scaled_summary, scaled_verdicts

__all__ = ["ALPHA", "SCHEMA", "STUDY", "Temperature", "critical_values", "NORM_ALPHA", "NORM_B0", "NORM_CHECKS",
           "PROTOCOL_PATH", "NORM_SEED_GROUP", "SCALED_PROTOCOL", "SCALED_SEED_GROUP"]

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
#: the note of a verdict whose cells had task errors (simkit.runner.verdict)
TASK_ERRORS = "{n} cell(s) with task errors (see cell_error)"


def critical_values(cfg: dict) -> dict[str, float]:
    """Critical values of the ce, kl and c1 checks at ALPHA each (simkit.stats.temperature.critical_values)."""
    return _critical_values(len(cfg["settings"].split(",")), int(cfg["n_tau"]), int(cfg["n_blocks"]),
                            int(cfg["kl_anchors"]), ALPHA)


S, T, ST = ("setting",), ("tau",), ("setting", "tau")
STK, STB = ("setting", "tau", "k"), ("setting", "tau", "block")
NATS = "in nats (dimensionless, udunits '1')"

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
    "prep_coef": Var((*STK, "cv_term"), "control-variate coefficients", "1", "from an independent pilot per cell"),
    **summary_schema(ALPHA, ESS_RELIABLE, K_ONSET_FACTOR),
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
#: per-cell constants of the prepare stage and their shapes after the cell dimension (for runs
#: in which no preparation finished)
_PREP = {"c1": (2,), "ce": (2,), "rho": (), "mbar": (), "kl_mean": (2,), "kl_sup": (), "entropy": (2,)}
_RAW = {**{n: ("k",) for n in ("gap_cv", "gap_plain", "loss")}, "ell_inf": (),
        **{n: ("anchor",) for n in ("kl_exact", "kl_q", "kl_q_mcse", "kl_is", "kl_is_mcse", "kl_is_ess")}}


def _setting_verdicts(i: int, s: dict, ex: np.ndarray, cell_error: np.ndarray, taus: np.ndarray, kappa_m: float,
                      dim: int, crit: dict) -> dict:
    """Verdicts, reasons and descriptive fields of setting ``i`` from the summaries ``s``."""
    errors = [str(e) for e in cell_error[i] if str(e)]
    keys = ("kl_sup_exact", "kl_upper", "kl_upper_is", "c1_exact", "c1_exact_mcse", "z2_ratio", "ce_z", "kl_ratio")
    out, probs = setting_rules({n: s[n][i] for n in keys}, ex[i], s["kl_bound"], taus, kappa_m, dim, crit)
    out["verdict_kl_exact"] = verdict(probs["kl_exact"], errors, error_note=TASK_ERRORS).verdict
    out["verdict_kl_mc"] = verdict(probs["kl_mc"], errors, error_note=TASK_ERRORS).verdict
    for c in ("kl", "ce", "c1"):
        out[f"verdict_{c}"], out[f"verdict_{c}_reason"] = verdict(probs[c], errors, error_note=TASK_ERRORS)
    return out


def _cells_text(ds: xr.Dataset) -> str:
    return f"{ds.sizes['setting']} settings x {ds.sizes['tau']} tau"


CHECKS = (
    Check("C5", lambda ds: f"deterministic check: every exact per-anchor KL(Q(x,.)||pi) (sampled anchors and the "
                           f"largest over x) <= 2/tau, {_cells_text(ds)}; estimate: the largest exact KL / (2/tau)",
          kl_exact_check, None, label="deterministic check: exact KL / (2/tau)"),
    Check("C5", lambda ds: f"max over anchors of KL(Q(x,.)||pi) / (2/tau), {_cells_text(ds)}; Monte Carlo: "
                           f"KL_hat - {ds.attrs['z_kl']:.2f} MCSE <= 2/tau for both estimators (a proven "
                           f"inequality: no false-failure rate is stated)",
          kl_mc_check, None, label="Monte Carlo KL / (2/tau), largest over anchors"),
    Check("C5", lambda ds: f"CE Monte Carlo (block mean of l_inf) against exact CE at every tau: |z| <= "
                           f"{ds.attrs['z_ce']:.2f} (Bonferroni t)", ce_check, ALPHA, lambda ds: ce_pvalues(ds, ALPHA),
          label="CE Monte Carlo against exact CE, largest |z| over tau"),
    Check("C5", "small tau inflates the bias: E[Z2/Z^2] nondecreasing as tau decreases; |c1(tau_min)| > max |c1| "
                "over tau >= 1/kappa_M (estimate: the smallest ratio of the two over settings; a test that must "
                "reject: its level is a false-pass rate, its miss rate is 1 - power and is not stated)", c1_check, None),
)


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


#: raw block variables of the norms cells (the KL / CE / c1 cells leave them NaN, and the norms cells theirs)
_NORM_RAW = {f"norm_{n}": () for n in NORM_BLOCK_STATS}


SCHEMA.update(norm_schema(NORM_RULE_NAMES), **scaled_schema(NORM_RULE_NAMES))
#: the scaled rule (same margin as a rate, level, planned miss rate): cells "norms-scaled-<chunk>", seeds apart
SCALED_PROTOCOL, SCALED_SETTING, SCALED_SEED_GROUP = "protocols/temperature_scaled.md", "norms-scaled", {"design": "norms-scaled"}


def _norm_generate(cell: dict, cfg: dict, rng: np.random.Generator) -> dict:
    """One norms block at the cell's tau (simkit.estimators.norms.norm_block); every tau of a block shares
    its seeds (NORM_SEED_GROUP). Blocks beyond norm_blocks are NaN and marked skipped."""
    block, chunk = block_of(rng), cell["setting"].removeprefix(SCALED_SETTING + "-")
    group, index = (NORM_SEED_GROUP, block) if chunk == cell["setting"] else (
        SCALED_SEED_GROUP, int(chunk) * cfg["norm_blocks"] + block)  # scaled cells: chunks of norm_blocks blocks
    out = {name: np.nan for name in NORM_BLOCK_STATS}
    if block >= cfg["norm_blocks"]:
        out["skipped"] = 1.0
    else:
        out = norm_block(cell["kappa_m"], cell["tau"], cfg["norm_beta"], cfg["norm_n"], cfg["norm_k"], cfg["norm_eval"],
                         common_seeds(cfg["seed"], "temperature", group, index, 3), dim=P_NORM,
                         maxiter=cfg["norm_maxiter"])
    return {f"norm_{n}": np.asarray(v, dtype=float) for n, v in out.items()}


def _norm_eval(ds: xr.Dataset, c: str) -> dict:
    return rule_check(ds, "norm", c, NORM_B0, NORM_RULE_NAMES[c])


def _scaled_sha(ds: xr.Dataset) -> str:
    return str(ds.attrs.get("protocol_scaled_sha256", "?"))[:16]


NORM_CHECKS = (
    Check("C5", lambda ds: f"pre-registered rule (protocols/temperature.md, sha256 {recorded_sha(ds)}…): the gap's "
          "sensitivity S = dG/deps to the negatives' embedding norms (psi = r u_W before normalisation, psi(y_j) -> "
          "e^eps psi(y_j)) "
          f"grows as tau falls: one-sided jackknife t test of H0 slope of log E[S] on log tau >= {NORM_B0:.3f} AND "
          f"E[S](tau_min) > 0, each at {NORM_ALPHA:g} (false-failure rate {NORM_BETA:g} = 1 - planned power at the "
          "design alternative, not a guarantee for smaller effects)",
          lambda ds: _norm_eval(ds, "primary"), NORM_BETA, protocol=PROTOCOL_PATH),
    Check("C5", lambda ds: f"pre-registered null control (protocols/temperature.md, sha256 {recorded_sha(ds)}…): the "
          "same rule on S of the fixed reference psi = r x (not trained, E[S] = 0 exactly) must NOT pass",
          lambda ds: _norm_eval(ds, "null"), NORM_ALPHA,
          # the rule passes only if its level test rejects; E[S](tau_min) = 0 exactly for psi = r x, the
          # boundary of H0 E[S] <= 0, so the one-sided p-value is uniform (the slope test of log E[S] has
          # no null distribution when E[S] = 0, and needs none: the level test bounds the rate)
          pvalues=lambda ds: {"level": (float(ds["norm_null_level_p"].values), NORM_ALPHA)},
          protocol=PROTOCOL_PATH),
    Check("C5", lambda ds: f"pre-registered control (protocols/temperature.md, sha256 {recorded_sha(ds)}…): the "
          "negatives' norms changed in a component the score ignores (S = 0 up to rounding); the rule must NOT "
          "pass (deterministic)",
          lambda ds: _norm_eval(ds, "ignored"), None, protocol=PROTOCOL_PATH),
    Check("C5", lambda ds: f"pre-registered rule ({SCALED_PROTOCOL}, sha256 {_scaled_sha(ds)}…): tau S, the sensitivity "
          f"with the 1/tau score scale removed, grows as tau falls: one-sided jackknife t test of H0 slope of log(tau "
          f"E[S]) on log tau >= {NORM_B0:.3f} AND E[S] > 0 at the smallest tau of its grid, each at {NORM_ALPHA:g} "
          f"(false-failure rate 1 - planned power at this design's blocks, at least {NORM_BETA:g}; not a guarantee)",
          lambda ds: rule_check(ds, "scaled", "primary", NORM_B0, "tau S", "of log(tau E[S]) "),
          lambda ds: planned_miss_rate(ds.sizes.get("scaled_block", 0), NORM_ALPHA, NORM_BETA), protocol=SCALED_PROTOCOL),
    Check("C5", lambda ds: f"pre-registered null control ({SCALED_PROTOCOL}, sha256 {_scaled_sha(ds)}…): the scaled "
          "rule on S of the fixed reference psi = r x (E[S] = 0 exactly) must NOT pass",
          lambda ds: rule_check(ds, "scaled", "null", NORM_B0, "null control", "of log(tau E[S]) "), NORM_ALPHA,
          pvalues=lambda ds: {"level": (float(ds["scaled_null_level_p"].values), NORM_ALPHA)}, protocol=SCALED_PROTOCOL),
    Check("C5", lambda ds: f"pre-registered control ({SCALED_PROTOCOL}, sha256 {_scaled_sha(ds)}…): the scaled rule "
          "with the norms changed in a score-ignored component (S = 0) must NOT pass (deterministic)",
          lambda ds: rule_check(ds, "scaled", "ignored", NORM_B0, "score-ignored control", "of log(tau E[S]) "), None,
          protocol=SCALED_PROTOCOL),
)


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
        "scaled_taus": Param("scaled_taus", float, "1,0.5,0.2", f"temperatures of the scaled rule ({SCALED_PROTOCOL})",
                             multi=True, min_items=2, low=TAU_MIN, high=100.0, descending=True,
                             items_doc=f"temperatures in [{TAU_MIN:g}, 100]"),
        "scaled_chunks": Param("scaled_chunks", int, 6, "chunks of norm_blocks blocks of the scaled rule (pre-registered)",
                               low=1, high=1000, quick=1),
    }

    def check_config(self, cfg):
        if not cfg["tau_min"] < cfg["tau_max"]:
            raise ValueError(f"'tau_min' must be < tau_max = {cfg['tau_max']:g}, got {cfg['tau_min']:g}")
        if cfg["k_fixed"] > cfg["k_max"]:
            raise ValueError(f"'k_fixed' must be <= k_max = {cfg['k_max']}, got {cfg['k_fixed']}")

    def n_blocks(self, cfg):
        return max(int(cfg["n_blocks"]), int(cfg["norm_blocks"]))

    def cells(self, cfg):
        """(setting, tau) of the KL / CE / c1 grid, row-major; then one cell per tau of the norms design."""
        taus = tau_grid(cfg["tau_min"], cfg["tau_max"], cfg["n_tau"])
        s = {n: SETTINGS[n] for n in cfg["settings"].split(",")}
        return ([{"setting": n, "pi": f, "dim": int(d), "kappa_pi": float(kp), "kappa_m": float(km), "tau": t}
                 for n, (f, d, kp, km, _) in s.items() for t in taus]
                + [{"setting": NORMS_SETTING, "pi": "uniform", "dim": P_NORM, "kappa_pi": 0.0,
                    "kappa_m": float(cfg["norm_kappa_m"]), "tau": float(t)}
                   for t in self.params["norm_taus"].values(cfg["norm_taus"])]
                + [{"setting": f"{SCALED_SETTING}-{c}", "pi": "uniform", "dim": P_NORM, "kappa_pi": 0.0, "kappa_m": float(
                    cfg["norm_kappa_m"]), "tau": float(t)} for c in range(cfg["scaled_chunks"])
                   for t in self.params["scaled_taus"].values(cfg["scaled_taus"])])

    def _estimator(self, cell, cfg) -> GapEstimator:
        return GapEstimator(build_pi(cell), VMFKernel(cell["kappa_m"]), cell["tau"], cfg["k_max"])

    def block_dims(self, cfg):
        return {**_RAW, **_NORM_RAW}, {"k": k_grid(cfg["k_max"]), "anchor": np.arange(cfg["kl_anchors"])}

    def prepare(self, cell, cfg, rng):
        """Control-variate pilot, then every exact constant; Monte Carlo (mixtures) from ``rng`` only.
        The norms cells have no constants."""
        if cell["setting"].startswith(NORMS_SETTING):
            return {}
        est = self._estimator(cell, cfg)
        coef = est.calibrate(cfg["block_anchors"], rng, n_blocks=cfg["pilot_blocks"])
        return {"coef": coef, **temperature_constants(est.pi, cell["kappa_m"], est.tau, est.grid, n_mc=cfg["n_mc"],
                                                      rng=rng)}

    def generate(self, cell, cfg, prep, rng):
        nan = {n: np.full(len(self.block_dims(cfg)[1][dims[0]]) if dims else (), np.nan)
               for n, dims in {**_RAW, **_NORM_RAW}.items()}
        if cell["setting"].startswith(NORMS_SETTING):
            return {**nan, **_norm_generate(cell, cfg, rng)}
        key = getattr(getattr(rng.bit_generator, "seed_seq", None), "spawn_key", ())
        if len(key) >= 2 and key[-2] == 1 and key[-1] >= cfg["n_blocks"]:
            return nan  # a block beyond n_blocks, run only for the norms design (norm_blocks > n_blocks)
        nan = {n: v for n, v in nan.items() if n in _NORM_RAW}
        est = self._estimator(cell, cfg)
        out = est.block(cfg["block_anchors"], rng, prep["coef"])
        return {**{n: out[n] for n in ("gap_cv", "gap_plain", "loss", "ell_inf")},
                **kl_estimates(est.pi, est.tau, cfg["kl_anchors"], cfg["kl_samples"], rng=rng), **nan}

    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        """The raw cells laid out over (setting, tau), the summaries with their MCSE, and the verdicts; the
        norms cells over (tau_n, norm_block) with their summaries, rules and verdicts."""
        setting, nb = raw["setting"].values.astype(str), int(cfg["norm_blocks"])
        is_norm, is_scaled = setting == NORMS_SETTING, np.char.startswith(setting, SCALED_SETTING + "-")
        norm_raw = raw.isel({raw["setting"].dims[0]: np.flatnonzero(is_norm), "block": slice(0, nb)})
        scaled_raw = raw.isel({raw["setting"].dims[0]: np.flatnonzero(is_scaled), "block": slice(0, nb)})
        raw = raw.isel({raw["setting"].dims[0]: np.flatnonzero(~is_norm & ~is_scaled),
                        "block": slice(0, int(cfg["n_blocks"]))})
        norm_taus = np.array(self.params["norm_taus"].values(cfg["norm_taus"]))
        settings = cfg["settings"].split(",")
        taus = np.array(tau_grid(cfg["tau_min"], cfg["tau_max"], cfg["n_tau"]))
        k = raw["k"].values
        n_set, n_tau = len(settings), taus.size
        shapes = {"prep_coef": (k.size, len(CV_TERMS)), "prep_gap_exact": (k.size,),
                  **{f"prep_{n}": s for n, s in _PREP.items()}}
        grid = cell_grid(raw, (n_set, n_tau), shapes)
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
        out = {**ce_summary(blocks["ell_inf"], p["ce"], p["entropy"]), **bias_summary(p, taus, K_ONSET_FACTOR),
               **kl_summary(blocks, p, 2.0 / taus, crit["kl"]), **gap_summary(blocks, p["gap_exact"], k)}
        rows = [_setting_verdicts(i, out, blocks["kl_exact"].reshape(n_set, n_tau, -1), ds["cell_error"].values, taus,
                                  float(ds["kappa_m"].values[i]), int(ds["dim"].values[i]), crit)
                for i in range(n_set)]
        out.update({name: np.array([r[name] for r in rows]) for name in rows[0]})
        ds.coords["tau_n"] = ("tau_n", norm_taus)
        ds.coords["norm_block"] = ("norm_block", np.arange(int(cfg["norm_blocks"])))
        v = {n: norm_raw[f"raw_norm_{n}"].values for n in NORM_BLOCK_STATS}
        norms, rules = norm_summary(v, norm_taus, b0=NORM_B0, alpha=NORM_ALPHA)
        errors = "; ".join(f"tau = {t:g}: {e}" for t, e in zip(norm_taus, norm_raw["cell_error"].values) if str(e))
        out.update(norms, **{f"raw_norm_{n}": a for n, a in v.items()},
                   **norm_verdicts(rules["primary"], rules["null"], rules["ignored"], errors))
        s_taus = np.array(self.params["scaled_taus"].values(cfg["scaled_taus"]))
        ds.coords["tau_s"], ds.coords["scaled_block"] = ("tau_s", s_taus), np.arange(nb * int(cfg["scaled_chunks"]))
        w = {n: scaled_raw[f"raw_norm_{n}"].values.reshape(-1, s_taus.size, nb).transpose(1, 0, 2).reshape(
            s_taus.size, -1) for n in NORM_BLOCK_STATS}  # (chunk x tau, block) -> (tau, chunk x block)
        scaled, srules = scaled_summary(w, s_taus, b0=NORM_B0, alpha=NORM_ALPHA)
        errors = "; ".join(f"{s}, tau = {t:g}: {e}" for s, t, e in zip(
            scaled_raw["setting"].values, scaled_raw["tau"].values, scaled_raw["cell_error"].values) if str(e))
        out.update(scaled, **{f"raw_scaled_{n}": a for n, a in w.items()},
                   **scaled_verdicts(srules["primary"], srules["null"], srules["ignored"], errors))
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
                **protocol_attrs(SCALED_PROTOCOL, prefix="protocol_scaled"),
                "analysis": ("norms clause confirmatory (protocols/temperature.md); KL, CE and c1 checks exploratory"
                             if not cfg.get("quick") else "quick (CI) design: not the confirmatory run")}

    def summary_text(self, ds) -> str:
        kf = int(dataset_config(ds).get("k_fixed", 64))
        j = int(np.flatnonzero(ds["k"].values == kf)[0]) if kf in ds["k"].values else -1
        tables = [f"{s}:\n" + estimate_table(ds.isel(setting=i), "tau", {
            "ce_exact": "CE exact", "ce_estimate": "CE MC", "ce_z": "z", "c1_exact": "c1 exact", "z2_ratio": "E[Z2/Z²]",
            "kl_max": "KL max", "kl_bound": "2/tau", "k_gap": f"{int(ds['k'].values[j])}·gap"}, select={"k": j})
            for i, s in enumerate(ds["setting"].values)]
        norms = estimate_table(ds, "tau_n", {"norm_gap_cv": "G", "norm_gap_tau": "G·tau", "norm_sens_cv": "S",
                                             "norm_sens_tau": "S·tau", "norm_sens_ref": "S null",
                                             "norm_sens_ignored": "S ignored", "norm_fd_rel_error": "FD rel err"})
        scaled = estimate_table(ds, "tau_s", {"scaled_sens_cv": "S", "scaled_sens_tau": "S·tau", "scaled_gap_cv": "G",
                                              "scaled_sens_ref": "S null"})
        return "\n\n".join([*tables, "norms clause\n" + norms, "scaled rule\n" + scaled, super().summary_text(ds)])


STUDY = Temperature()
