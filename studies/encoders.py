"""Claims C1, C2 and C7 at learned embeddings: InfoNCE-trained encoders S^2 -> S^{d-1}.

The population is (pi_N, M_N): N atoms of a vMF mixture on S^2 with the Discrete approximation of a vMF
or rotated vMF kernel, so Z, Z2, m1, CE, c1, c2, the exact gap curve and ideal retrieval are exact finite
sums for ANY embedding. Linear and two-layer encoders (d = 8, 32) are trained by InfoNCE; at the trained
phi_hat the study tests the 1/k rate of gap_k (C1, against the 1/sqrt(k) alternative of Li, Wei, Yang &
Ying 2026), D_k (C2) and both for the non-reversible rotated kernel (C7), and, along training
checkpoints, whether "InfoNCE learns retrieval" by a test stated before the first run (training risk
falls; top-1 agreement improves and CE(M_hat_k, Q_hat_k) falls, one-sided paired t tests at ALPHA).
Those C2 checks are exploratory; the pre-registered rules of protocols/encoders.md replace them as
the test of C2: R (D_k with its second-order term in the fit, against a 1/sqrt(k) term, with a power
condition) and L (top-1 rise from a collapsed start in the vMF cells only; the rotated cells are the
representability limit of a symmetric score). The ADEMP statement is ``Encoders.ademp``.

Run it: ``simkit run encoders`` (or ``python -m simkit run encoders``).
"""

from __future__ import annotations

import math

import numpy as np

from simkit.stats.analysis import (C1_NAMES, combine_verdicts, rate_columns, rate_verdict, setting_pvalues,
                                   truth_columns, worst_slope)
from simkit.stats.retrieval import RETRIEVAL_METRICS, collapsed_start_rule, retrieval_change, retrieval_schema
from simkit.distributions.designs import MIXTURE_SEED, MIXTURE_WEIGHTS, mixture_means
from simkit.embeddings.embedding import TwoLayerEmbedding, family_embedding, padded_params
from simkit.embeddings.perturbation import collapse_output
from simkit.stats.trend import DETECT_POWER, paired_t_power, sqrt_k_term_test, sqrt_k_term_vars
from simkit.exact.finite import exact_constants, log_weights
from simkit.estimators.finite import block_terms, retrieval_terms, sample_rows
from simkit.estimators.infonce import k_grid
from simkit.distributions.kernels import RotatedVMFKernel, VMFKernel
from simkit.claims.protocol import protocol_attrs
from simkit.runner import (Check, Param, Study, Var, block_means, dataset_config, estimate_vars, rate_vars, recorded_sha,
                           settings_check, verdict_vars)
from simkit.distributions.sphere import VMFMixture
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, checkpoints

#: false-failure rate of each per-setting test
ALPHA = 1e-3
#: C1 tests per setting: slope interval, c1, c2, exact curve, exact dgap
N_C1_TESTS = 5
#: fixed design constants (the same in every cell)
P = 3
KAPPA_PI = 4.0
KAPPA_M = 8.0
ANGLE = math.pi / 3
TAU = 0.5
HIDDEN = 32
D_MAX = 32
SETTINGS = {f"{enc}-d{d}-{ker}": (enc, d, ker) for enc in ("lin", "mlp") for d in (8, 32) for ker in ("vmf", "rot")}
CHECKPOINTS = (0, 5, 20, 100)
N_PARAMS_MAX = TwoLayerEmbedding.n_params_for(P, D_MAX, HIDDEN)
FAMILY = {"lin": "linear", "mlp": "two_layer"}
#: the pre-registered rules R (D_k with its second-order term) and L (retrieval from a far start)
PROTOCOL_PATH = "protocols/encoders.md"
#: R: power 0.9 against a 1/sqrt(k) term as large as D_k at k_min, or the setting is not assessed
R_POWER = DETECT_POWER
#: L: collapsed start (output layer u a^T + FAR_NOISE x random), precondition, margin, planned sd
FAR_NOISE = 0.05
MIN_RISK_FALL = 0.1
MARGIN = 0.05
PLANNED_SD_256 = 0.066

S, K, C = ("setting",), ("setting", "k"), ("setting", "ckpt")
NATS = "nats (dimensionless, udunits '1')"


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


def build_population(kernel_name: str):
    """The continuous law (vMF mixture on S^2) and positive kernel of a setting."""
    pi = VMFMixture(MIXTURE_WEIGHTS, mixture_means(P), [KAPPA_PI] * len(MIXTURE_WEIGHTS))
    if kernel_name == "vmf":
        return pi, VMFKernel(KAPPA_M)
    if kernel_name == "rot":
        return pi, RotatedVMFKernel.plane_rotation(P, ANGLE, KAPPA_M)
    raise ValueError(f"'kernel' must be 'vmf' or 'rot', got {kernel_name!r}")


def make_embedding(enc: str, d: int, theta: np.ndarray | None = None, *, rng=None):
    """The encoder family of a setting ("lin" or "mlp"); ``theta`` (possibly zero-padded) or a random start."""
    if enc not in FAMILY:
        raise ValueError(f"'encoder' must be 'lin' or 'mlp', got {enc!r}")
    return family_embedding(FAMILY[enc], P, d, HIDDEN, theta, rng=rng)


def planned_power(n_blocks: int, block_anchors: int, alpha: float) -> float:
    """Rule L's planned power per cell at the margin (protocols/encoders.md section 4): one-sided
    paired t on n_blocks - 1 df, sd PLANNED_SD_256 * sqrt(256 / block_anchors)."""
    return paired_t_power(n_blocks, PLANNED_SD_256 * math.sqrt(256 / block_anchors), MARGIN, alpha)


_RATE = {"c1_z": ("standardised difference of c1_estimate from c1_exact", "Student t on n_blocks - 1 df"),
         "c2_t": ("standardised difference of c2_estimate from c2_exact", "Student t on n_blocks - 1 df"),
         "curve_max_t": ("largest studentised deviation of the Monte Carlo gap curve from the exact curve",
                         "simkit.stats.truth_tests.max_t_test"),
         "curve_p": ("p-value of curve_max_t", "Efron bootstrap of the blocks, 9999 resamples (simkit.stats.analysis."
                     "truth_rng)"),
         "dgap_max_t": ("largest studentised deviation of dgap from the exact dgap", "simkit.stats.truth_tests.dgap_test"),
         "dgap_p": ("p-value of dgap_max_t", "as curve_p"),
         "expansion_scale": ("expansion scale", "max(E[Z2/Z^2], E[m1/Z]) at phi_hat")}
_JACK = "delete-one-block jackknife"

#: every variable and coordinate of the dataset
SCHEMA = {
    **{f"raw_{n}": _v(("setting", "block", "k"), f"per-block {n}, in nats", "per-block mean over anchors "
                      "(simkit.estimators.finite.block_terms); " + NATS) for n in ("gap_cv", "gap_plain", "loss", "dgap",
                                                                          "dgap_cv", "d2")},
    "raw_ell_inf": _v(("setting", "block"), "per-block mean of l_inf = -s(x,x+) + log Z(x), in nats", NATS),
    **{f"raw_ret_{n}": _v(("setting", "block", "ckpt"), f"per-block retrieval {n} along training",
                          "at a database of k_ret atoms, the same anchors and database at every checkpoint"
                          + ("; in nats" if n == "ce" else "")) for n in RETRIEVAL_METRICS},
    "prep_atoms": _v(("setting", "atoms_dim0", "atoms_dim1"), "atoms of pi_N on S^2", "N draws from the vMF mixture (prepare rng)"),
    "prep_theta": _v(("setting", "theta_dim0", "theta_dim1"), "encoder parameters at each checkpoint",
                     "flat parameter vector (simkit.embeddings.embedding), zero-padded to the longest"),
    **{f"prep_{n}": _v(("setting", f"{n}_dim0"), f"exact per-atom {n} at phi_hat", "natural log; used to centre the "
                       "control variates") for n in ("log_z", "log_z2", "log_m1")},
    **{f"prep_{n}": _v(S, f"per-setting constant {n} at phi_hat", "exact finite sums over pi_N (nats for c1, c2, CE)")
       for n in ("c1_exact", "c2_exact", "ce_exact", "rho", "mbar")},
    "prep_gap_exact": _v(("setting", "gap_exact_dim0"), "exact gap on the k grid at phi_hat, in nats", "every atom (no Monte Carlo)"),
    **{f"prep_{n}": _v(("setting", f"{n}_dim0"), d, "prepare stage; one value per checkpoint (ckpt)") for n, d in (
        ("train_risk", "empirical InfoNCE risk at the checkpoint, in nats"),
        ("ce_ckpt", "exact CE(M, Q) of (pi_N, M_N) at the checkpoint, in nats"),
        ("c1_ckpt", "exact c1 at the checkpoint, in nats"), ("iterations", "L-BFGS iterations actually made"))},
    **estimate_vars("gap", K, "finite-k gap R_k - log k - CE", "block mean of the control-variate estimator G_k", nats=True),
    **estimate_vars("gap_plain", K, "gap without control variates", "block mean of D_k", nats=True),
    **estimate_vars("k_gap", K, "k times gap", "approaches c1 as k grows", nats=True, mcse="k * gap_mcse"),
    **estimate_vars("loss", K, "InfoNCE risk R_k at phi_hat", "block mean of l_k", nats=True),
    **estimate_vars("dgap", K, "gap_k - gap_2k", "Z-free: D_k - D_2k with an exactly centred control variate (k <= K/4)",
                    nats=True),
    **estimate_vars("d2", K, "C2 curve D_k = R_k - E CE(M_hat_k, Q_hat_k)", "block mean, same tuples as gap (CRN), of "
                    "l_k - CE(M_hat_k, Q_hat_k) minus three exactly centred control variates (block_terms)", nats=True),
    **estimate_vars("ce_estimate", S, "Monte Carlo CE at phi_hat", "block mean of l_inf", nats=True),
    **estimate_vars("c1_estimate", S, "estimated c1", "WLS of gap on 1/k and 1/k^2 over k >= k_min", nats=True,
                    mcse=_JACK),
    **estimate_vars("c2_estimate", S, "estimated c2", "coefficient of 1/k^2", nats=True, mcse=_JACK),
    "gap_exact": _v(K, "exact gap at phi_hat, in nats", "expected_log_sum_parts at every atom"),
    "dgap_exact": _v(K, "exact gap_k - gap_2k, in nats", "from gap_exact; NaN where 2k is off the grid"),
    "ce_exact": _v(S, "exact cross-entropy CE(M, Q) at phi_hat, in nats", "finite sum over pi_N and M_N"),
    "c1_exact": _v(S, "exact c1 at phi_hat, in nats", "E[m1/Z - (Z2/Z^2 - 1)/2], finite sums (MCSE 0)"),
    "c2_exact": _v(S, "exact c2 at phi_hat, in nats", "second-order constant (simkit.diagnose formula), finite sums"),
    **{name: _v(S, long, desc) for name, (long, desc) in _RATE.items()},
    **verdict_vars("verdict", S, "verdict for C1 at phi_hat", f"pass when the level-{1 - ALPHA:g} slope interval contains "
                   f"-1, slope = -1/2 is rejected at {ALPHA:g}, c1 and c2 agree with exact, and the curve and dgap agree "
                   f"with the exact ones (each at {ALPHA:g})", reason_long_name="why C1 failed in a setting"),
    **verdict_vars("d2_verdict", S, "verdict for the C2 rate of D_k", "rate_verdict: -1 in the level-(1 - alpha) "
                   "interval, -1/2 rejected", reason_long_name="why the D_k rate failed"),
    **{f"raw_ret_far_{n}": _v(("setting", "block", "ckpt"), f"per-block retrieval {n} along training from the "
                              "collapsed start", "rule L (protocols/encoders.md); same anchors and database as raw_ret"
                              + ("; in nats" if n == "ce" else "")) for n in ("ce", "top1")},
    "prep_theta_far": _v(("setting", "theta_far_dim0", "theta_far_dim1"), "encoder parameters of the collapsed-start "
                         "run at each checkpoint", "rule L; flat parameter vector, zero-padded to the longest"),
    "prep_train_risk_far": _v(("setting", "train_risk_far_dim0"), "empirical InfoNCE risk of the collapsed-start run "
                              "at each checkpoint, in nats", "rule L; one value per checkpoint (ckpt)"),
    **rate_vars("gap_k", ALPHA, fit="fit_gap"),
    **rate_vars("D_k", ALPHA, prefix="d2_", fields=("slope", "slope_se", "slope_p_half", "k_min")),
    **sqrt_k_term_vars("rule R (protocols/encoders.md section 3)", R_POWER),
    **retrieval_schema("setting", ALPHA, min_risk_fall=MIN_RISK_FALL, margin=MARGIN, planned_sd=PLANNED_SD_256,
                       rule="rule L"),
    "ckpt": _v(("ckpt",), "L-BFGS iterations at the checkpoint", "maximum iterations of train() from the same start"),
    "k": _v(("k",), "number of negatives k", "geometric grid 1, 2, 4, ..., k_max"),
    "setting": _v(S, "design setting", "<encoder>-d<d>-<kernel>: lin/mlp, output dimension, vmf/rot kernel"),
    "encoder": _v(S, "encoder family", f"lin (LinearEmbedding) or mlp (TwoLayerEmbedding, tanh, {HIDDEN} hidden)"),
    "dim": _v(S, "embedding dimension d", "phi: S^2 -> S^{d-1}"),
    "kernel": _v(S, "positive kernel", f"vmf: vMF(x, {KAPPA_M:g}); rot: vMF(Rx, {KAPPA_M:g}), R a plane rotation "
                 f"by {ANGLE:.4f} rad; Discrete approximation over the atoms"),
}


def _rows(ds, kernel=None) -> np.ndarray:
    return np.array([i for i, k in enumerate(ds["kernel"].values) if kernel is None or str(k) == kernel], dtype=int)


def _c1_check(ds, rows=None) -> dict:
    rows = _rows(ds) if rows is None else rows
    return settings_check(ds, rows, "slope", rows[worst_slope(ds["slope"].values[rows], ds["slope_se"].values[rows])],
                          "verdict", lambda i: f"slope {ds['slope'].values[i]:.4f} ± {ds['slope_se'].values[i]:.4f}, "
                          f"c1 z {ds['c1_z'].values[i]:+.2f}", "verdict_reason")


def _c2_check(ds) -> dict:
    return settings_check(ds, _rows(ds), "d2_slope", worst_slope(ds["d2_slope"].values, ds["d2_slope_se"].values),
                          "d2_verdict", lambda i: f"D_k slope {ds['d2_slope'].values[i]:.4f} ± {ds['d2_slope_se'].values[i]:.4f}")


def _min_t(ds, rows, est) -> int:
    t = ds[est].values[rows] / ds[f"{est}_mcse"].values[rows]
    return int(rows[np.nanargmin(t)]) if np.any(np.isfinite(t)) else int(rows[0])


def _ret_check(ds) -> dict:
    rows = _rows(ds)
    return settings_check(ds, rows, "ret_top1_diff", _min_t(ds, rows, "ret_top1_diff"), "ret_verdict", lambda i: f"top-1 {ds['ret_top1'].values[i, 0]:.3f} -> {ds['ret_top1'].values[i, -1]:.3f} (p "
                          f"{ds['ret_top1_p'].values[i]:.2g}), CE p {ds['ret_ce_p'].values[i]:.2g}")


def _c7_check(ds) -> dict:
    rows = _rows(ds, "rot")
    out = _c1_check(ds, rows) if rows.size else settings_check(ds, rows, "slope", 0, "verdict", str)
    v = [out["verdict"], *(str(ds[n].values[i]) for n in ("d2_verdict", "ret_verdict") for i in rows)]
    out["verdict"] = combine_verdicts(v) if rows.size else "error"
    out["detail"] += "; D_k and retrieval: " + ", ".join(
        f"{ds['setting'].values[i]} {ds['d2_verdict'].values[i]}/{ds['ret_verdict'].values[i]}" for i in rows)
    return out


def _c1_pvalues(ds) -> dict:
    return setting_pvalues(ds, ALPHA, {"slope": ("p", "slope_p_one"), "c1": ("t", "c1_z"), "c2": ("t", "c2_t"),
                                       "curve": ("p", "curve_p"), "dgap": ("p", "dgap_p")})


def _r_check(ds, rows=None) -> dict:
    rows = _rows(ds) if rows is None else rows
    t = np.abs(ds["r_t"].values[rows])
    worst = int(rows[np.nanargmax(t)]) if np.any(np.isfinite(t)) else int(rows[0]) if len(rows) else 0
    return settings_check(ds, rows, "r_c", worst, "r_verdict", lambda i: (
        f"c {ds['r_c'].values[i]:+.3g} ± {ds['r_c_se'].values[i]:.2g} (t {ds['r_t'].values[i]:+.2f}, MDE "
        f"{ds['r_mde'].values[i]:.2g} vs {ds['r_c_match'].values[i]:.2g}), d1 {ds['r_a'].values[i]:+.3f} ± "
        f"{ds['r_a_se'].values[i]:.3f}"), empty="not assessed")


def _r_rate(ds, rows=None) -> float:
    rows = _rows(ds) if rows is None else rows
    return 1.0 - (1.0 - ALPHA) ** sum(str(ds["r_verdict"].values[i]) in ("pass", "fail") for i in rows)


def _l_check(ds) -> dict:
    rows = _rows(ds, "vmf")
    return settings_check(ds, rows, "far_top1_diff", _min_t(ds, rows, "far_top1_diff") if rows.size else 0,
                          "far_verdict", lambda i: f"top-1 {ds['far_top1'].values[i, 0]:.3f} -> "
                          f"{ds['far_top1'].values[i, -1]:.3f} (rise {ds['far_top1_diff'].values[i]:+.3f} ± "
                          f"{ds['far_top1_diff_mcse'].values[i]:.3f}, p {ds['far_top1_p'].values[i]:.2g}; risk fall "
                          f"{ds['far_risk_fall'].values[i]:.3f})", empty="not assessed")


def _l_rate(ds) -> float:
    n = int(_rows(ds, "vmf").size)
    return 1.0 - planned_power(ds.sizes["block"], _anchors(ds), ALPHA) ** n if n else math.nan


def _anchors(ds) -> int:
    return int(dataset_config(ds).get("block_anchors", 256))


CHECKS = (
    Check("C1", lambda ds: (f"at InfoNCE-trained encoders, {ds.sizes['setting']} settings: slope of log gap_k on log k "
                            f"(with 1/k term); -1 in the level-{1 - ALPHA:g} interval, -1/2 (1/sqrt(k)) rejected, c1 and "
                            f"c2 against their exact values at phi_hat, MC curve and Z-free dgap against the exact "
                            f"curve (max |t|, bootstrap reference)"),
          _c1_check, lambda ds: 1.0 - (1.0 - N_C1_TESTS * ALPHA) ** ds.sizes["setting"], _c1_pvalues,
          label="gap slope and c1 at trained encoders"),
    Check("C2", lambda ds: (f"at trained encoders, {ds.sizes['setting']} settings: slope of log D_k, D_k = R_k - "
                            f"E CE(M_hat_k, Q_hat_k); -1 in the level-{1 - ALPHA:g} interval, -1/2 rejected"),
          _c2_check, lambda ds: 1.0 - (1.0 - ALPHA) ** ds.sizes["setting"], label="D_k log-log slope (earlier rule)"),
    Check("C2", lambda ds: ("InfoNCE learns retrieval (pre-stated): along training the risk falls and, paired over "
                            f"blocks, top-1 agreement of Q_hat with M_hat rises and CE(M_hat, Q_hat) falls from the "
                            f"first to the last checkpoint (one-sided paired t, {ALPHA:g} each), "
                            f"{ds.sizes['setting']} settings; tests that must reject: {ALPHA:g} is their false-pass "
                            f"rate, and no false-failure rate is stated (no power was planned)"),
          _ret_check, None, label="retrieval from a random start (earlier test)"),
    Check("C7", lambda ds: ("C1 (as above), the D_k rate and retrieval at trained encoders under the non-reversible "
                            "rotated kernel vMF(Rx, kappa); stated rate: the C1 and D_k tests only (retrieval must "
                            "reject, so it has a false-pass rate and no stated false-failure rate)"),
          _c7_check, lambda ds: 1.0 - (1.0 - (N_C1_TESTS + 1) * ALPHA) ** max(1, int(_rows(ds, "rot").size)),
          label="rotated cells: C1, earlier D_k and retrieval rules"),
    Check("C2", lambda ds: (f"pre-registered rule R (protocols/encoders.md, sha256 {recorded_sha(ds)}…): D_k = a/k + b/k^2 + "
                            f"c/sqrt(k) over k >= k_min at trained encoders, {ds.sizes['setting']} settings; two-sided t "
                            f"of c = 0 at {ALPHA:g} (jackknife); a setting without power 0.9 against a 1/sqrt(k) term "
                            f"as large as D_k at k_min is not assessed"),
          _r_check, _r_rate, protocol=PROTOCOL_PATH, label="R: D_k with 2nd-order term, 1/sqrt(k) coefficient"),
    Check("C2", lambda ds: (f"pre-registered rule L (protocols/encoders.md, sha256 {recorded_sha(ds)}…): InfoNCE learns "
                            f"retrieval: top-1 rise from a collapsed start in the vMF cells, one-sided paired t at "
                            f"{ALPHA:g}, precondition risk fall >= {MIN_RISK_FALL:g} nats; stated rate 1 - power at "
                            f"the margin {MARGIN:g} (planned sd {PLANNED_SD_256:g} at 256 anchors)"),
          _l_check, _l_rate, protocol=PROTOCOL_PATH, label="L: top-1 rise from a collapsed start"),
    Check("C7", lambda ds: (f"pre-registered rule R (protocols/encoders.md, sha256 {recorded_sha(ds)}…) in the rotated-kernel "
                            f"settings: D_k = a/k + b/k^2 + c/sqrt(k), two-sided t of c = 0 at {ALPHA:g}"),
          lambda ds: _r_check(ds, _rows(ds, "rot")), lambda ds: _r_rate(ds, _rows(ds, "rot")), protocol=PROTOCOL_PATH,
          label="R in the rotated cells"),
)


class Encoders(Study):
    name = "encoders"
    claim = "C1, C2, C7"
    title = "Claims C1, C2, C7 at InfoNCE-trained encoders"
    cell_dim = "setting"
    ademp = {
        "aim": "C1 (gap_k = c1/k + O(1/k^2), not 1/sqrt(k)), C2 (D_k = O(1/k); InfoNCE learns retrieval) and C7 "
               "(rotated kernel) at embeddings trained by InfoNCE",
        "data": f"pi_N = N atoms from the vMF mixture on S^2 (kappa_pi {KAPPA_PI:g}); M_N = the Discrete "
                f"(importance-weight) approximation of vMF(x, {KAPPA_M:g}) or vMF(Rx, {KAPPA_M:g}); linear and "
                f"two-layer tanh encoders S^2 -> S^(d-1), d in {{8, 32}}, trained by L-BFGS on InfoNCE; tau {TAU:g}",
        "estimand": "at phi_hat: gap_k, its slope, c1, c2, dgap_k, D_k; along training: risk, CE, retrieval "
                    "CE(M_hat, Q_hat), top-1 agreement, recall@10",
        "methods": "exact finite sums over pi_N for Z, m1, CE, c1, c2 and the gap curve at any phi; block Monte Carlo "
                   "with exactly centred control variates; rate_verdict and truth_verdict (simkit.stats.analysis); "
                   "paired one-sided t tests along training (pre-stated)",
        "performance": "slope +- jackknife SE, p(-1/2), c1 z, curve/dgap p-values, retrieval +- MCSE",
    }
    schema = SCHEMA
    checks = CHECKS
    params = {
        "settings": Param("settings", str, ",".join(SETTINGS), "comma-separated settings", choices=tuple(SETTINGS),
                          multi=True, quick="lin-d8-vmf,mlp-d32-rot"),
        "n_atoms": Param("n_atoms", int, 512, "atoms N of pi_N", low=64, high=8192, quick=256),
        "n_train": Param("n_train", int, 512, "training tuples", low=16, high=1 << 16, quick=256),
        "k_train": Param("k_train", int, 32, "negatives per training tuple", low=1, high=4096, quick=16),
        "k_max": Param("k_max", int, 4096, "negatives per block (power of two)", low=64, high=1 << 16,
                       power_of_two=True, quick=2048),
        "n_blocks": Param("n_blocks", int, 48, "replicate blocks per setting", low=8, high=10000, quick=24),
        "block_anchors": Param("block_anchors", int, 256, "anchors per block", low=8, high=1 << 14, quick=128),
        "k_ret": Param("k_ret", int, 256, "database size of the retrieval metrics", low=16, high=1 << 14, quick=128),
        "k_min_factor": Param("k_min_factor", float, 16.0, "fit k >= k_min_factor * expansion scale", low=0.0),
    }

    def check_config(self, cfg):
        if cfg["k_ret"] > cfg["k_max"]:
            raise ValueError(f"'k_ret' must be <= k_max = {cfg['k_max']}, got {cfg['k_ret']}")

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            enc, d, ker = SETTINGS[name]
            out.append({"setting": name, "encoder": enc, "dim": int(d), "kernel": ker})
        return out

    def block_dims(self, cfg):
        dims = {n: ("k",) for n in ("gap_cv", "gap_plain", "loss", "dgap", "dgap_cv", "d2")}
        dims["ell_inf"] = ()
        for n in ("ce", "top1", "recall10"):
            dims[f"ret_{n}"] = ("ckpt",)
        for n in ("ce", "top1"):
            dims[f"ret_far_{n}"] = ("ckpt",)
        return dims, {"k": k_grid(cfg["k_max"]), "ckpt": np.array(CHECKPOINTS)}

    def prepare(self, cell, cfg, rng):
        pi, kernel = build_population(cell["kernel"])
        n = cfg["n_atoms"]
        atoms = pi.rvs(n, rng=rng)
        log_w = log_weights(pi, kernel, atoms)
        ix = rng.integers(n, size=cfg["n_train"])
        ipos = sample_rows(log_w[ix], rng)
        ineg = rng.integers(n, size=(cfg["n_train"], cfg["k_train"]))
        risk = EmpiricalRisk(TrainingSample(atoms[ix], atoms[ipos], atoms[ineg]), TAU)
        init = make_embedding(cell["encoder"], cell["dim"], rng=rng)
        thetas, risks, ces, c1s, iters = [], [], [], [], []
        for phi, it in checkpoints(risk, init, CHECKPOINTS):
            thetas.append(padded_params(phi, N_PARAMS_MAX))
            risks.append(risk.value(phi))
            ex = exact_constants(phi(atoms), log_w, TAU)
            ces.append(ex["ce"])
            c1s.append(ex["c1"])
            iters.append(it)
        ex = exact_constants(phi(atoms), log_w, TAU, k_grid(cfg["k_max"]))
        far = collapse_output(init, FAR_NOISE, rng=rng)  # rule L: a second run from a collapsed start (drawn last)
        far_run = checkpoints(risk, far, CHECKPOINTS)
        far_thetas = [padded_params(phi_f, N_PARAMS_MAX) for phi_f, _ in far_run]
        far_risks = [risk.value(phi_f) for phi_f, _ in far_run]
        out = {"atoms": atoms, "theta": np.array(thetas), "log_z": ex["log_z"], "log_z2": ex["log_z2"],
               "log_m1": ex["log_m1"], "c1_exact": ex["c1"], "c2_exact": ex["c2"], "ce_exact": ex["ce"],
               "rho": ex["rho"], "mbar": ex["mbar"], "gap_exact": ex["gap_exact"], "train_risk": np.array(risks),
               "ce_ckpt": np.array(ces), "c1_ckpt": np.array(c1s), "iterations": np.array(iters, dtype=float),
               "theta_far": np.array(far_thetas), "train_risk_far": np.array(far_risks)}
        return {k: np.asarray(v, dtype=float) for k, v in out.items()}

    def generate(self, cell, cfg, prep, rng):
        pi, kernel = build_population(cell["kernel"])
        atoms = np.asarray(prep["atoms"])
        atoms = atoms / np.linalg.norm(atoms, axis=1, keepdims=True)
        n = atoms.shape[0]
        grid = k_grid(cfg["k_max"])
        b = cfg["block_anchors"]
        anchors = rng.integers(n, size=b)
        lw = log_weights(pi, kernel, atoms, anchors)
        pos = sample_rows(lw, rng)
        neg = rng.integers(n, size=int(grid[-1]))
        embs = [make_embedding(cell["encoder"], cell["dim"], th) for th in np.asarray(prep["theta"])]
        out = block_terms(embs[-1](atoms), lw, anchors, pos, neg, prep["log_z"], prep["log_z2"], prep["log_m1"],
                          TAU, grid)
        db = neg[: cfg["k_ret"]]
        ret = [retrieval_terms(e(atoms), lw, anchors, db, TAU) for e in embs]
        for name in ("ce", "top1", "recall10"):
            out[f"ret_{name}"] = np.array([r[name] for r in ret])
        far = [retrieval_terms(make_embedding(cell["encoder"], cell["dim"], th)(atoms), lw, anchors, db, TAU)
               for th in np.asarray(prep["theta_far"])]
        for name in ("ce", "top1"):
            out[f"ret_far_{name}"] = np.array([r[name] for r in far])
        return out

    def summarise(self, raw, cfg) -> dict:
        k = raw["k"].values
        n_s = raw.sizes["setting"]
        out = block_means(raw, {"gap": "gap_cv", "gap_plain": "gap_plain", "loss": "loss", "dgap": "dgap_cv", "d2": "d2",
                                "ce_estimate": "ell_inf"})
        out["k_gap"], out["k_gap_mcse"] = out["gap"] * k, out["gap_mcse"] * k
        scale = np.maximum(raw["prep_rho"].values, raw["prep_mbar"].values)
        out["expansion_scale"] = scale
        for name in ("c1_exact", "c2_exact", "ce_exact", "gap_exact"):
            out[name] = raw[f"prep_{name}"].values
        out["dgap_exact"] = np.full((n_s, k.size), np.nan)
        out["dgap_exact"][:, :-1] = out["gap_exact"][:, :-1] - out["gap_exact"][:, 1:]
        failed = [bool(str(raw["cell_error"].values[i])) for i in range(n_s)]
        rows = [rate_verdict(k, raw["raw_gap_cv"].values[i], float(scale[i]), cfg["k_min_factor"],
                             float(out["c1_exact"][i]), 0.0, alpha=ALPHA, test_constant=True,
                             failed_blocks=failed[i]) for i in range(n_s)]
        out.update(rate_columns(rows, SCHEMA, names={**C1_NAMES, "fit_abs": "fit_gap", "reason": "verdict_reason"}))
        truth_columns(out, k, raw["raw_gap_cv"].values, raw["raw_dgap_cv"].values, raw["setting"].values, cfg["seed"],
                      alpha=ALPHA)
        d2rows = [rate_verdict(k, raw["raw_d2"].values[i], float(scale[i]), cfg["k_min_factor"], math.nan, 0.0,
                               alpha=ALPHA, test_constant=False, failed_blocks=failed[i]) for i in range(n_s)]
        out.update(rate_columns(d2rows, SCHEMA, prefix="d2_", names={"reason": "d2_verdict_reason"}))
        out.update(retrieval_change({n: raw[f"raw_ret_{n}"].values for n in RETRIEVAL_METRICS},
                                    raw["prep_train_risk"].values, ALPHA))
        rr = [sqrt_k_term_test(k, raw["raw_d2"].values[i], float(out["k_min"][i]) if np.isfinite(out["k_min"][i])
                               else math.inf, alpha=ALPHA, power=R_POWER) for i in range(n_s)]
        out.update({f"r_{field}": [r[field] for r in rr] for field in rr[0]})
        rot = ["rotated kernel: a symmetric score cannot represent vMF(Rx, kappa)" if str(ker) != "vmf" else ""
               for ker in raw["kernel"].values]
        out.update(collapsed_start_rule({n: raw[f"raw_ret_far_{n}"].values for n in ("ce", "top1")},
                                        raw["prep_train_risk_far"].values, rot, ALPHA, MIN_RISK_FALL))
        return out

    def attrs(self, cfg):
        return {**protocol_attrs(PROTOCOL_PATH), "alpha": ALPHA, "tau": TAU, "kappa_pi": KAPPA_PI, "kappa_m": KAPPA_M, "rotation_angle": ANGLE,
                "hidden": HIDDEN, "mixture_weights": list(MIXTURE_WEIGHTS), "mixture_seed": MIXTURE_SEED,
                "checkpoints": list(CHECKPOINTS),
                "route": "pi_N = N atoms of the vMF mixture (prepare rng), M_N = Discrete importance-weight "
                         "approximation of the kernel: Z, CE, c1, c2 and the gap curve exact for any phi",
                "retrieval_test": "pre-stated: risk falls; one-sided paired t (blocks) of top-1 rise and "
                                  "CE(M_hat, Q_hat) fall, first vs last checkpoint, alpha each"}


STUDY = Encoders()
