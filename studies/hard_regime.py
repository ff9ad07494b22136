"""Claim C1 at expansion scale 50 (confirmatory): uniform pi on S^2, tau = 0.02, k up to 2^20; and
sensitivity tables of the rate verdict (exploratory).

Pre-registered in ``protocols/hard_regime.md`` (Hotelling F curve tests) and, on the same design and
blocks, ``protocols/hard_regime_maxt.md`` (rate_k's bootstrap max-t curve tests; the protocol whose
path, SHA-256 and commit the dataset records). Estimator and rules are rate_k's (GapEstimator,
rate_verdict and truth_verdict at alpha = 1e-3); the fit starts at k_min = smallest grid k >= 16 * 50.
Cells: ``hard`` (confirmatory), ``hard:b=<size>`` and the rate_k settings (exploratory tables of the
rate verdict's sensitivity to the k_min factor, block size and pilot size); their layout and the ADEMP
statement: docs/design.md, "studies/hard_regime" (also ``HardRegime.ademp``, stored in the dataset).

Run it: ``simkit run hard_regime`` (the pre-registered design) or ``--quick`` (CI, never confirmatory).
"""

from __future__ import annotations

import copy
import math
from functools import partial

import numpy as np

from simkit import VMFKernel, exact
from simkit.stats.analysis import (C1_NAMES, RATE_FIELDS, TRUTH_FIELDS, cell_pvalues, mean_mcse, rate_truth_verdict,
                                   rate_verdict, truth_rng)
from simkit.distributions.designs import RATE_SETTINGS, build_pi
from simkit.exact.curve import gap_curve, second_order_constant
from simkit.estimators.infonce import GapEstimator, control_variate_means, k_grid
from simkit.stats.sensitivity import (block_groups, exact_fit_bias, k_min_sensitivity, nested_pilot_coefficients,
                                      pilot_sensitivity, put_row, sensitivity_tables, sensitivity_vars, size_cell_blocks,
                                      sub_blocks_per_task)
from simkit.claims.protocol import protocol_attrs, protocol_sha256
from simkit.runner import Check, Param, Study, Var, block_of, check_result, estimate_vars, recorded_sha

__all__ = ["STUDY", "SCHEMA", "ALPHA", "N_ALPHA_TESTS", "HARD", "PROTOCOL_PATH", "PROTOCOL_MAXT_PATH", "rate_rule",
           "confirmatory_verdict"]

#: level of each of the five component tests of both rules (as rate_k): slope interval, c1 t, c2 t, curve, dgap
ALPHA = 1e-3
N_ALPHA_TESTS = 5
PROTOCOL_PATH = "protocols/hard_regime.md"
#: the same rule with the bootstrap max-t curve and dgap tests (the dataset's confirmatory protocol)
PROTOCOL_MAXT_PATH = "protocols/hard_regime_maxt.md"
#: uniform pi on S^2, vMF kernel kappa_M = 50, tau = 1/kappa_M: expansion scale 50 (not the pre-asymptotic regime)
HARD = {"pi": "uniform", "dim": 3, "kappa_pi": 0.0, "kappa_m": 50.0, "tau": 0.02}
#: anchors per block of the confirmatory cell and of the rate_k-setting cells (rate_k's value)
BLOCK_ANCHORS = 256

C, CB, CK = ("cell",), ("cell", "block"), ("cell", "k")
NATS = "nats (dimensionless, udunits '1')"


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


# the dataset
SCHEMA = {
    # raw replicate blocks
    "raw_gap_cv": _v(("cell", "block", "sub", "k"), "per-(sub-)block control-variate gap G_k, in nats",
                     "mean over the block's anchors of D_k - b_A A_k - b_B B_k - b_C C_k (simkit.estimators.infonce); block = "
                     "engine task, sub = sub-block within the task (block-size cells with blocks smaller than a task); "
                     "NaN where a task runs no such sub-block; " + NATS),
    "raw_gap_plain": _v(("cell", "block", "k"), "per-block mean of D_k = l_k - log k - l_inf, in nats",
                        "256-anchor cells only (NaN elsewhere); " + NATS),
    "raw_dgap_cv": _v(("cell", "block", "k"), "per-block Z-free dgap_k = gap_k - gap_2k with its control variate, "
                      "in nats", "256-anchor cells only; NaN where 2k is off the grid; " + NATS),
    "raw_ell_inf": _v(CB, "per-block mean of l_inf = -s(x,x+) + log Z(x), in nats", NATS),
    **{f"raw_cv_{n}": _v(("cell", "block", "k"), f"per-block mean of the control variate {n.upper()}_k",
                         "the first sens_pilot_blocks blocks of the 256-anchor cells (NaN elsewhere): recovered from "
                         "GapEstimator.block on the same draws (see the module docstring); for the pilot-size table") for n in ("a", "b", "c")},
    "prep_coef": _v(("cell", "coef_dim0", "coef_dim1"), "control-variate coefficients of the cell",
                    "from pilot_blocks pilot blocks of 256 anchors (GapEstimator.calibrate); NaN beyond the cell's k grid"),
    "prep_pilot_coef": _v(("cell", "pilot_coef_dim0", "pilot_coef_dim1", "pilot_coef_dim2"),
                          "control-variate coefficients by pilot size", "pilot sizes of the 'pilot' coordinate; "
                          "nested pilots (the same first pilot blocks); 0 = Taylor values (1, 1, -1/2)"),
    **{f"prep_{n}": _v(C, f"per-cell constant {n}", "prepare stage (exact values; nats for c1, c2 and CE)")
       for n in ("c1_exact", "c1_exact_mcse", "ce_exact", "ce_exact_mcse", "c2_exact", "c2_exact_mcse", "rho", "mbar")},
    "prep_gap_exact": _v(("cell", "gap_exact_dim0"), "exact gap on the k grid, in nats", "simkit.exact.curve.gap_curve; "
                         "256-anchor cells with exact quadrature (uniform, vMF pi); NaN elsewhere"),
    "prep_gap_exact_cov": _v(("cell", "gap_exact_cov_dim0", "gap_exact_cov_dim1"), "covariance of the exact gap's "
                             "Monte Carlo error across k (nats squared)", "zero: the curve is exact where computed"),
    # per-cell summaries
    **estimate_vars("gap", CK, "finite-k gap R_k - log k - CE", "mean over the cell's (sub-)blocks of G_k",
                    nats=True, mcse="sd over (sub-)blocks / sqrt(their number)"),
    **estimate_vars("k_gap", CK, "k times gap", "approaches c1 as k grows", nats=True, mcse="k * gap_mcse"),
    **estimate_vars("gap_exact", CK, "exact gap", "simkit.exact.curve.gap_curve (Frullani integral, no expansion); NaN "
                    "where not computed", nats=True, mcse="0 where exact"),
    "fit_gap": _v(CK, "fitted gap, in nats", "exp of the WLS fit of log gap on log k and 1/k (k >= k_min)"),
    "resid_rate": _v(CK, "standardised residual of the rate fit", "(log gap - fit) / (gap_mcse / gap)"),
    "n_units": _v(C, "independent blocks in the cell's analysis", "finished (sub-)blocks"),
    "anchors_total": _v(C, "anchors in the cell's analysis", "n_units * block_size"),
    "expansion_scale": _v(C, "expansion scale", "max(E[Z2/Z^2], E[m1/Z]) (simkit.exact.expansion_scales); k_min = "
                          "smallest grid k >= k_min_factor * scale"),
    "c2_over_c1": _v(C, "c2 / c1", "the k at which c2/k^2 equals c1/k (descriptive; not the k_min rule)"),
    **{name: _v(C, f"rate rule: {name}", f"simkit.stats.analysis.rate_verdict field {name!r} at the protocol's k_min "
                "factor; see rate_k's dataset for the definitions") for name in
       ("slope", "slope_se", "slope_ci_low", "slope_ci_high", "slope_p_half", "slope_p_one", "slope_verdict_low",
        "slope_verdict_high", "curvature", "slope_se_wls", "k_min")},
    **estimate_vars("c1_estimate", C, "estimated c1", "WLS of gap on 1/k, 1/k^2, k >= k_min", nats=True, mcse="delete-one-block jackknife"),
    **estimate_vars("c2_estimate", C, "estimated c2", "coefficient of 1/k^2", nats=True, mcse="delete-one-block jackknife"),
    "c1_z": _v(C, "standardised difference of c1_estimate from c1_exact", "Student t on n_units - 1 df"),
    **estimate_vars("c1_exact", C, "exact c1", "E[m1/Z - (Z2/Z^2 - 1)/2] (simkit.exact.bias_constant); (kappa coth kappa "
                   "+ 1)/2 for the hard cell", nats=True, mcse="0 where exact (Monte Carlo over x for the mixture)"),
    **estimate_vars("c2_exact", C, "exact c2", "simkit.exact.curve.second_order_constant (docs/theory.md §8)",
                    nats=True, mcse="0 where exact"),
    "ce_exact": _v(C, "exact cross-entropy CE(M, Q), in nats", "simkit.exact.cross_entropy"),
    **estimate_vars("ce_estimate", C, "Monte Carlo CE", "block mean of l_inf (256-anchor cells)", nats=True),
    **{name: _v(C, f"exact-curve test: {name}", "simkit.stats.analysis.truth_verdict_standardised (the tests of "
                "truth_verdict on columns divided by their between-block sd; the confirmatory cell only, NaN elsewhere): "
                "c2_t Student t, curve and dgap Hotelling T^2 with p-values") for name in TRUTH_FIELDS},
    **{f"{t}_max_t{p}": _v(C, f"{'p-value of ' if p else ''}max_k |t_k| of the {t} against the exact {t}", "simkit."
                           "stats.truth_tests.max_t_test, Efron bootstrap of the blocks (truth_rng(seed, 'hard')); the "
                           "confirmatory cell only (protocols/hard_regime_maxt.md)") for t in ("curve", "dgap") for p in ("", "_p")},
    "max_t_verdict": _v(C, "verdict for C1 under the max-t rule", "confirmatory cell: protocols/hard_regime_maxt.md "
                        "(rate rule, c2 t, max-t curve and dgap tests at 1e-3 each); other cells: the rate rule alone"),
    "max_t_verdict_reason": _v(C, "why the cell failed the max-t rule", "empty when it passed"),
    "rate_verdict": _v(C, "rate-rule verdict", "simkit.stats.analysis.rate_verdict at the protocol's k_min factor: pass, "
                       "fail or error"),
    "verdict": _v(C, "verdict for C1", f"confirmatory cell: pass when the rate rule passes AND the exact-curve tests find no "
                  f"problem (every component test at {ALPHA:g}); other cells: the rate rule alone (exploratory)"),
    "verdict_reason": _v(C, "why the cell failed", "empty when it passed"),
    "slope_exact_fit": _v(C, "slope of the rate fit applied to the exact curve", "the same WLS (log gap on 1, log k, "
                          "1/k; the Monte Carlo weights) on gap_exact: the method's bias at k_min (exploratory)"),
    "c1_exact_fit": _v(C, "c1 of the constant fit applied to the exact curve, in nats",
                       "WLS of gap_exact on 1/k, 1/k^2 (Monte Carlo weights): the fit's truncation bias (exploratory)"),
    **sensitivity_vars("cell", "the first sens_pilot_blocks blocks of the 256-anchor cells"),
    # coordinates
    "cell": _v(C, "design cell", "hard (confirmatory), hard:b=<size> and the rate_k settings (exploratory)"),
    "base": _v(C, "setting of the cell", "hard or a name of simkit.distributions.designs.RATE_SETTINGS"),
    "role": _v(C, "role of the cell", "confirmatory, rate_k (256-anchor blocks, exploratory) or block_size (exploratory)"),
    "block_size": _v(C, "anchors per block", "sharing the block's k_max negatives"),
    "total_anchors": _v(C, "anchors per cell by design", "n_blocks * 256 (256-anchor cells) or sens_total"),
    "k_max": _v(C, "negatives per block", "largest k of the cell; the k grid beyond it is NaN"),
    "pi": _v(C, "data distribution family", "uniform, vmf (mean e_1) or mixture (simkit.distributions.designs.build_pi)"),
    "dim": _v(C, "ambient dimension d", "points on S^{d-1} in R^d"),
    "kappa_pi": _v(C, "concentration of pi", "vMF concentration of pi or of each mixture component"),
    "kappa_m": _v(C, "kernel concentration kappa_M", "M(x, .) = vMF(x, kappa_M)"),
    "tau": _v(C, "temperature tau", "score s(x, y) = x.y / tau"),
    "k": _v(("k",), "number of negatives k", "geometric grid 1, 2, 4, ..., k_max"),
    "sub": _v(("sub",), "sub-block within a task", "index"),
    "kmf": _v(("kmf",), "k_min factor", "k_min = smallest grid k >= kmf * expansion_scale"),
    "pilot": _v(("pilot",), "pilot size", "pilot blocks of 256 anchors for the control-variate coefficients (0: Taylor)"),
}


# the rule (protocols/hard_regime.md section 5): rate_k's, through the library
def rate_rule(k: np.ndarray, blocks: np.ndarray, scale: float, k_min_factor: float, c1: float, c1_mcse: float, *,
              failed_blocks: bool = False) -> dict:
    """The rate part of the rule: :func:`simkit.stats.analysis.rate_verdict` at :data:`ALPHA` with the c1 test, exactly
    as rate_k calls it (k_min = smallest grid k >= k_min_factor * scale)."""
    return rate_verdict(k, blocks, scale, k_min_factor, c1, c1_mcse, alpha=ALPHA, test_constant=True,
                        failed_blocks=failed_blocks)


def confirmatory_verdict(rate: dict, k: np.ndarray, gap_blocks: np.ndarray, dgap_blocks: np.ndarray,
                         gap_exact: np.ndarray, gap_exact_cov: np.ndarray | None, c2: tuple[float, float],
                         c2_exact: tuple[float, float], **kw) -> tuple[str, str, dict]:
    """The whole rule: the rate part (``rate`` from :func:`rate_rule`) and the exact-curve tests, each at
    :data:`ALPHA` (:func:`simkit.stats.analysis.rate_truth_verdict`): standardised Hotelling (protocols/hard_regime.md)
    or, with ``kw`` ``reference="max-t", rng=...``, bootstrap max-t (protocols/hard_regime_maxt.md)."""
    return rate_truth_verdict(rate, k, gap_blocks, dgap_blocks, gap_exact, gap_exact_cov, c2, c2_exact, alpha=ALPHA, **kw)


# the check
def _hard(ds):
    cells = [str(c) for c in ds["cell"].values]
    if "hard" not in cells:
        raise ValueError("the dataset has no 'hard' cell")
    return ds.isel(cell=cells.index("hard"))


def _c1_check(ds, max_t: bool = False) -> dict:
    h = _hard(ds)
    g = lambda n: float(h[n].values)  # noqa: E731
    verdict, reason = (str(h[f"{'max_t_' * max_t}verdict{r}"].values) for r in ("", "_reason"))
    m = ("_max_t", " max-t") if max_t else ("", "")
    detail = (f"hard (uniform S^2, kappa_M 50, tau 0.02, k <= {int(g('k_max'))}, k_min {g('k_min'):.0f}): slope "
              f"{g('slope'):.4f} ± {g('slope_se'):.4f} (level-{1 - ALPHA:g} interval [{g('slope_verdict_low'):.4f}, "
              f"{g('slope_verdict_high'):.4f}], p(-1/2) {g('slope_p_half'):.2g}); c1 {g('c1_estimate'):.4f} ± "
              f"{g('c1_estimate_mcse'):.4f} vs exact {g('c1_exact'):.4f} (t {g('c1_z'):+.2f}); c2 t {g('c2_t'):+.2f}; "
              f"curve{m[1]} p {g(f'curve{m[0]}_p'):.3g}, dgap{m[1]} p {g(f'dgap{m[0]}_p'):.3g}")
    return check_result(g("slope"), g("slope_se"), verdict, detail, reason)


def _c1_pvalues(ds, max_t: bool = False) -> dict[str, tuple[float, float]]:
    h, curve = _hard(ds), {n: ("p", f"{n}_max_t_p" if max_t else f"{n}_p") for n in ("curve", "dgap")}
    return cell_pvalues(h, ALPHA, {"slope": ("p", "slope_p_one"), "c1": ("t", "c1_z"), "c2": ("t", "c2_t"), **curve},
                        n_blocks=int(h["n_units"].values), label="hard")


def _c1(max_t: bool) -> Check:
    path, curve = (PROTOCOL_MAXT_PATH, "bootstrap max-t") if max_t else (PROTOCOL_PATH, "Hotelling T^2")
    sha = lambda ds: recorded_sha(ds) if ds.attrs.get("protocol_path") == path else str(protocol_sha256(path))[:16]  # noqa: E731
    return Check(
        claim="C1",
        statistic=lambda ds: (f"pre-registered rule ({path}, sha256 {sha(ds)}…): C1 at tau = 0.02 "
                              f"(expansion scale 50), k up to 2^20: log-log slope (with 1/k term) over k >= 16 x scale, "
                              f"-1 in the level-{1 - ALPHA:g} interval, -1/2 rejected, c1 and c2 against exact (Student "
                              f"t), MC curve and Z-free dgap against the exact curve at every k ({curve}), each at "
                              f"{ALPHA:g} (simkit.stats.analysis.rate_verdict, truth_verdict)"),
        evaluate=partial(_c1_check, max_t=max_t), false_fail_rate=1.0 - (1.0 - ALPHA) ** N_ALPHA_TESTS,
        pvalues=partial(_c1_pvalues, max_t=max_t), protocol=path)


C1_CHECK, C1_MAXT_CHECK = _c1(False), _c1(True)


# the study
class HardRegime(Study):
    name = "hard_regime"
    claim = "C1"
    title = "Claim C1 at expansion scale 50 (confirmatory): tau = 0.02, k up to 2^20; sensitivity of the rate verdict"
    cell_dim = "cell"
    default_seed = 20261214
    ademp = {
        "aim": "C1 where the expansion scale is 50 (uniform pi on S^2, tau = 0.02): gap_k = c1/k + O(1/k^2), "
               "rate 1/k not 1/sqrt(k) (protocols/hard_regime.md); sensitivity of the rate verdict (exploratory)",
        "data": "uniform pi on S^2, vMF(x, 50) positives, tau = 0.02, phi = identity; 2^20 negatives per block; "
                "the rate_k settings at 2^16 for the exploratory tables",
        "estimand": "gap_k on k = 1..2^20; its log-log slope; c1 = 25.5",
        "methods": "GapEstimator (CRN across k, exact-mean control variates, pilot coefficients); rate_verdict and "
                   "truth_verdict at alpha = 1e-3 (the rate_k rule); jackknife over blocks",
        "performance": "slope +- SE, intervals, p(-1/2), c1/c2 t, curve and dgap T^2 p and max-t p; sensitivity tables "
                       "over the k_min factor, block size and pilot size",
    }
    schema = SCHEMA
    checks = (C1_CHECK, C1_MAXT_CHECK)
    params = {
        "n_blocks": Param("n_blocks", int, 64, "replicate blocks of the confirmatory cell (pre-registered); also the "
                          "number of engine tasks of every cell", low=8, high=100000, quick=20),
        "k_max": Param("k_max", int, 1 << 20, "negatives per block of the hard cells (power of two)", low=16,
                       high=1 << 20, power_of_two=True, quick=1 << 13),
        "pilot_blocks": Param("pilot_blocks", int, 4, "pilot blocks (256 anchors) for the control-variate "
                              "coefficients", low=1, high=64, quick=2),
        "k_min_factor": Param("k_min_factor", float, 16.0, "fit k >= k_min_factor * expansion scale", low=0.0),
        "kappa_m": Param("kappa_m", float, HARD["kappa_m"], "kernel concentration of the hard cells", low=0.0,
                         high=1e6),
        "tau": Param("tau", float, HARD["tau"], "temperature of the hard cells", low=0.005),
        "n_mc": Param("n_mc", int, 1 << 18, "Monte Carlo size over x for constants without a 1-D reduction (mixture)",
                      low=1024, high=1 << 24, quick=1 << 16),
        "sens_block_sizes": Param("sens_block_sizes", int, "32,64,128,256,512,1024", "block sizes of the hard "
                                  "block-size cells (powers of two; empty for none)", quick="32,512", multi=True,
                                  min_items=0, low=8, power_of_two=True, sort=False, items_doc="powers of two >= 8"),
        "sens_total": Param("sens_total", int, 4096, "anchors of every block-size cell (a multiple of n_blocks)",
                            low=64, high=1 << 24, quick=2560),
        "sens_pilots": Param("sens_pilots", int, "0,1,2,4,8", "pilot sizes of the pilot-size table (0 = Taylor "
                             "coefficients)", quick="0,1,2", multi=True, min_items=0, low=0, high=64, sort=False,
                             items_doc="integers in [0, 64]"),
        "sens_pilot_blocks": Param("sens_pilot_blocks", int, 16, "the first blocks of each 256-anchor cell that also "
                                   "record the control-variate means (the pilot-size table uses them)", low=3,
                                   high=100000, quick=12),
        "sens_k_min_factors": Param("sens_k_min_factors", float, "4,8,16,32,64", "k_min factors of the k_min table",
                                    quick="4,16,64", multi=True, low=0.0, low_open=True, sort=False,
                                    items_doc="numbers > 0"),
        "rate_settings": Param("rate_settings", str, "uniform-d3,vmf-d8,mixture-d16", "rate_k settings of the "
                               "exploratory tables (empty for none)", quick=""),
        "rate_k_max": Param("rate_k_max", int, 1 << 16, "negatives per block of the rate_k-setting cells", low=16,
                            high=1 << 20, power_of_two=True, quick=4096),
        "rate_block_sizes": Param("rate_block_sizes", int, "32,1024", "block sizes of the rate_k-setting block-size "
                                  "cells (empty for none)", quick="", multi=True, min_items=0, low=8, power_of_two=True,
                                  sort=False, items_doc="powers of two >= 8"),
    }

    # -- design ------------------------------------------------------------------------------
    def check_config(self, cfg):
        if cfg["sens_total"] % cfg["n_blocks"]:
            raise ValueError(f"'sens_total' must be a multiple of n_blocks = {cfg['n_blocks']}, got {cfg['sens_total']}")
        for name in ("sens_block_sizes", "rate_block_sizes"):
            sub_blocks_per_task(name, self._list(cfg, name), cfg["sens_total"], cfg["n_blocks"])
        for name in ("sens_pilots", "sens_k_min_factors"):  # the lists' own checks
            self._list(cfg, name)
        for s in [s for s in str(cfg["rate_settings"]).split(",") if s.strip()]:
            if s not in RATE_SETTINGS:
                raise ValueError(f"'rate_settings' must name settings of simkit.distributions.designs.RATE_SETTINGS "
                                 f"({', '.join(RATE_SETTINGS)}), got {s!r}")
        if cfg["rate_k_max"] > cfg["k_max"]:
            raise ValueError(f"'rate_k_max' must be <= k_max = {cfg['k_max']}, got {cfg['rate_k_max']}")

    def _list(self, cfg, name: str) -> list:
        """The numbers of list parameter ``name``, in the given order."""
        return self.params[name].values(cfg[name])

    def _sub(self, cfg) -> int:
        sizes = self._list(cfg, "sens_block_sizes") + self._list(cfg, "rate_block_sizes")
        return sub_blocks_per_task("block sizes", sizes, cfg["sens_total"], cfg["n_blocks"])

    def cells(self, cfg):
        out = []

        def add(base, setting, role, b, k_max):
            name = base if role != "block_size" else f"{base}:b={b}"
            out.append({"cell": name, "base": base, "role": role, "block_size": int(b),
                        "total_anchors": int(cfg["n_blocks"] * BLOCK_ANCHORS if role != "block_size" else cfg["sens_total"]),
                        "k_max": int(k_max), **setting})

        hard = {**HARD, "kappa_m": float(cfg["kappa_m"]), "tau": float(cfg["tau"])}
        add("hard", hard, "confirmatory", BLOCK_ANCHORS, cfg["k_max"])
        for b in self._list(cfg, "sens_block_sizes"):
            add("hard", hard, "block_size", b, cfg["k_max"])
        for s in [s for s in str(cfg["rate_settings"]).split(",") if s.strip()]:
            fam, d, kp, km, tau = RATE_SETTINGS[s]
            setting = {"pi": fam, "dim": int(d), "kappa_pi": float(kp), "kappa_m": float(km), "tau": float(tau)}
            add(s, setting, "rate_k", BLOCK_ANCHORS, cfg["rate_k_max"])
            for b in self._list(cfg, "rate_block_sizes"):
                add(s, setting, "block_size", b, cfg["rate_k_max"])
        return out

    def block_dims(self, cfg):
        dims = {"gap_cv": ("sub", "k"), "gap_plain": ("k",), "dgap_cv": ("k",), "ell_inf": (),
                "cv_a": ("k",), "cv_b": ("k",), "cv_c": ("k",)}
        return dims, {"k": k_grid(cfg["k_max"]), "sub": np.arange(self._sub(cfg))}

    @staticmethod
    def _estimator(cell) -> GapEstimator:
        return GapEstimator(build_pi(cell), VMFKernel(cell["kappa_m"]), cell["tau"], cell["k_max"])

    # -- stages ------------------------------------------------------------------------------
    def prepare(self, cell, cfg, rng):
        est = self._estimator(cell)
        pi, kernel, tau = est.pi, est.kernel, est.tau
        n_full, n_k = k_grid(cfg["k_max"]).size, est.grid.size
        pilots = self._list(cfg, "sens_pilots")
        main = cell["role"] != "block_size"
        pilot_coef = (nested_pilot_coefficients(est, BLOCK_ANCHORS, rng, pilots, n_full) if main
                      else np.full((len(pilots), n_full, 4), np.nan))
        coef = np.full((n_full, 4), np.nan)
        coef[:n_k] = est.calibrate(BLOCK_ANCHORS, rng, n_blocks=cfg["pilot_blocks"])
        c1 = exact.bias_constant(pi, kernel, tau, n_mc=cfg["n_mc"], rng=rng)
        rho, mbar = exact.expansion_scales(pi, kernel, tau, n_mc=cfg["n_mc"], rng=rng)
        # CE and c2 are not needed by the rate rule of a block-size cell (Monte Carlo for the mixture: skipped)
        ce = exact.cross_entropy(pi, kernel, tau, n_mc=cfg["n_mc"], rng=rng) if main else math.nan
        c2 = second_order_constant(pi, kernel, tau, rng=rng, n_mc=cfg["n_mc"]) if main else math.nan
        gap_ex = np.full(n_full, np.nan)
        if main and cell["pi"] != "mixture":  # exact quadrature; the mixture's curve would be Monte Carlo
            gap_ex[:n_k] = gap_curve(pi, kernel, tau, est.grid, rng=rng).gap
        out = {"coef": coef, "pilot_coef": pilot_coef, "rho": rho, "mbar": mbar, "gap_exact": gap_ex,
               "gap_exact_cov": np.zeros((n_full, n_full))}
        for name, v in (("c1_exact", c1), ("ce_exact", ce), ("c2_exact", c2)):
            out[name], out[f"{name}_mcse"] = ((v.value, v.mcse) if isinstance(v, exact.Estimate) else (v, 0.0))
        return {n: np.asarray(v, dtype=float) for n, v in out.items()}

    def generate(self, cell, cfg, prep, rng):
        est = self._estimator(cell)
        n_full, n_k = k_grid(cfg["k_max"]).size, est.grid.size
        n_sub = self._sub(cfg)
        coef = np.asarray(prep["coef"])[:n_k]
        out = {"gap_cv": np.full((n_sub, n_full), np.nan), "ell_inf": np.array(np.nan),
               **{n: np.full(n_full, np.nan) for n in ("gap_plain", "dgap_cv", "cv_a", "cv_b", "cv_c")}}
        if cell["role"] != "block_size":
            start = copy.deepcopy(rng)  # the block's draws, replayed for the control-variate means
            res = est.block(BLOCK_ANCHORS, rng, coef)
            out["gap_cv"][0, :n_k] = res["gap_cv"]
            for name in ("gap_plain", "dgap_cv"):
                out[name][:n_k] = res[name]
            out["ell_inf"] = np.asarray(res["ell_inf"], dtype=float)
            if block_of(rng) < cfg["sens_pilot_blocks"]:
                for name, v in zip(("cv_a", "cv_b", "cv_c"), control_variate_means(est, BLOCK_ANCHORS, start, coef, res)):
                    out[name][:n_k] = v
            return out
        b = int(cell["block_size"])
        for j, g in enumerate(size_cell_blocks(lambda: est.block(b, rng, coef)["gap_cv"], b, cfg["sens_total"],
                                               cfg["n_blocks"], lambda: block_of(rng))):
            out["gap_cv"][j, :n_k] = g
        return out

    # -- summaries ---------------------------------------------------------------------------
    def summarise(self, raw, cfg) -> dict:
        k_all = raw["k"].values
        n_cell, n_full = raw.sizes["cell"], k_all.size
        kmfs = self._list(cfg, "sens_k_min_factors")
        pilots = self._list(cfg, "sens_pilots")
        verdicts = ("rate_verdict", "verdict", "verdict_reason", "max_t_verdict", "max_t_verdict_reason")
        text = set(self.cells(cfg)[0]) | set(verdicts)  # design and verdicts
        out = {n: np.full((n_cell, n_full) if v.dims == CK else n_cell, np.nan) for n, v in SCHEMA.items()
               if v.dims in (C, CK) and not n.startswith("prep_") and n not in text}
        for n in verdicts:
            out[n] = [""] * n_cell
        out.update(sensitivity_tables(n_cell, len(kmfs), len(pilots)))
        for i in range(n_cell):
            n_k = int(np.log2(int(raw["k_max"].values[i]))) + 1
            k = k_all[:n_k]
            role = str(raw["role"].values[i])
            failed = bool(str(raw["cell_error"].values[i]))
            units = block_groups(raw["raw_gap_cv"].values[i][..., :n_k])
            units_fin = units[np.all(np.isfinite(units), axis=1)]
            scale = float(max(raw["prep_rho"].values[i], raw["prep_mbar"].values[i]))
            c1x, c1x_se = float(raw["prep_c1_exact"].values[i]), float(raw["prep_c1_exact_mcse"].values[i])
            for n in ("c1_exact", "c1_exact_mcse", "c2_exact", "c2_exact_mcse", "ce_exact"):
                out[n][i] = float(raw[f"prep_{n}"].values[i])
            out["expansion_scale"][i] = scale
            out["c2_over_c1"][i] = out["c2_exact"][i] / c1x
            out["n_units"][i] = units_fin.shape[0]
            out["anchors_total"][i] = units_fin.shape[0] * int(raw["block_size"].values[i])
            mean, mcse = mean_mcse(units, axis=0)
            out["gap"][i, :n_k], out["gap_mcse"][i, :n_k] = mean, mcse
            out["k_gap"][i, :n_k], out["k_gap_mcse"][i, :n_k] = mean * k, mcse * k
            gx = raw["prep_gap_exact"].values[i][:n_k]
            out["gap_exact"][i, :n_k] = gx
            out["gap_exact_mcse"][i, :n_k] = np.where(np.isfinite(gx), 0.0, np.nan)
            if role != "block_size":
                out["ce_estimate"][i], out["ce_estimate_mcse"][i] = mean_mcse(raw["raw_ell_inf"].values[i])

            def verdict(blocks, factor):
                return rate_rule(k, blocks, scale, factor, c1x, c1x_se, failed_blocks=failed)

            r = verdict(units, cfg["k_min_factor"])
            for f in RATE_FIELDS:
                name = C1_NAMES.get(f, f)
                if name in out and name not in ("sign", "k_sign"):
                    out[name][i] = r[f]
            out["fit_gap"][i, :n_k], out["resid_rate"][i, :n_k] = r["fit_abs"], r["resid_rate"]
            out["rate_verdict"][i] = out["verdict"][i] = out["max_t_verdict"][i] = r["verdict"]
            out["verdict_reason"][i] = out["max_t_verdict_reason"][i] = r["reason"]
            if np.isfinite(r["k_min"]):
                out["slope_exact_fit"][i], out["c1_exact_fit"][i] = exact_fit_bias(k, gx, mcse, r["k_min"])
            put_row(out, "kmf", i, k_min_sensitivity(verdict, units, kmfs, k, gx, mcse))
            if role == "block_size":
                continue
            rows = np.all(np.isfinite(raw["raw_cv_a"].values[i][:, :n_k]), axis=1)  # the first sens_pilot_blocks
            means = tuple(raw[f"raw_cv_{n}"].values[i][rows, :n_k] for n in ("a", "b", "c"))
            put_row(out, "pilot", i, pilot_sensitivity(verdict, raw["raw_gap_plain"].values[i][rows, :n_k], means,
                                                       raw["prep_pilot_coef"].values[i][:, :n_k], cfg["k_min_factor"]))
            if role == "confirmatory":
                args = (r, k, units, raw["raw_dgap_cv"].values[i][:, :n_k], gx,
                        raw["prep_gap_exact_cov"].values[i][:n_k, :n_k], (out["c2_estimate"][i],
                        out["c2_estimate_mcse"][i]), (out["c2_exact"][i], out["c2_exact_mcse"][i]))
                v, reason, fields = confirmatory_verdict(*args)
                for n, val in fields.items():
                    out[n][i] = val
                out["verdict"][i], out["verdict_reason"][i] = v, reason
                v, reason, fields = confirmatory_verdict(*args, reference="max-t", rng=truth_rng(cfg["seed"], "hard"))
                for t in ("curve", "dgap"):
                    out[f"{t}_max_t"][i], out[f"{t}_max_t_p"][i] = fields[f"{t}_max_t"], fields[f"{t}_p"]
                out["max_t_verdict"][i], out["max_t_verdict_reason"][i] = v, reason
        out["kmf"] = np.asarray(kmfs, dtype=float)
        out["pilot"] = np.asarray(pilots, dtype=float)
        return out

    def attrs(self, cfg):
        return {"alpha": ALPHA, **protocol_attrs(PROTOCOL_MAXT_PATH),
                "analysis": "confirmatory (cell 'hard'); every other cell and table exploratory"
                if not cfg.get("quick") else "quick (CI) design: not the confirmatory run"}


STUDY = HardRegime()
