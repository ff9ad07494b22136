"""Claims C1, C2 and C7 at learned embeddings: InfoNCE-trained encoders S^2 -> S^{d-1}.

The population is (pi_N, M_N): N atoms of a vMF mixture on S^2 with the Discrete approximation of a vMF
or rotated vMF kernel, so Z, Z2, m1, CE, c1, c2, the exact gap curve and ideal retrieval are exact finite
sums for ANY embedding. Linear and two-layer encoders (d = 8, 32) are trained by InfoNCE; at the trained
phi_hat the study tests the 1/k rate of gap_k (C1, against the 1/sqrt(k) alternative of Li, Wei, Yang &
Ying 2026), D_k (C2) and both for the non-reversible rotated kernel (C7), and, along training
checkpoints, whether "InfoNCE learns retrieval" by a test stated before the first run (training risk
falls; top-1 agreement improves and CE(M_hat_k, Q_hat_k) falls, one-sided paired t tests at ALPHA).
The ADEMP statement is the class attribute ``Encoders.ademp`` (stored in the dataset); in full, with
the retrieval test: docs/design.md, "studies/encoders".

Run it: ``simkit run encoders`` (or ``python -m simkit run encoders``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.special import logsumexp

from simkit.stats.analysis import (RATE_FIELDS, TRUTH_FIELDS_MAX_T, combine_verdicts, mean_mcse, rate_verdict, truth_rng, truth_verdict,
                             worst_slope)
from simkit.distributions.designs import MIXTURE_SEED, MIXTURE_WEIGHTS, mixture_means
from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.exact.curve import expected_log_sum_parts
from simkit.estimators.infonce import k_grid
from simkit.distributions.kernels import RotatedVMFKernel, VMFKernel
from simkit.runner import Check, Param, Study, Var
from simkit.distributions.sphere import VMFMixture
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train

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


def log_weights(pi, kernel, atoms: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """log w_ij of M_N for anchors ``atoms[rows]`` (all by default) over every atom j: rows sum to 1.

    w_ij is proportional to f_M(x_i, x_j) / f_pi(x_j) (importance weights of the kernel's density
    against the law the atoms were drawn from), normalised over j.
    """
    x = atoms if rows is None else atoms[rows]
    lw = kernel.logpdf(x[:, None, :], atoms[None, :, :]) - pi.logpdf(atoms)[None, :]
    return lw - logsumexp(lw, axis=1, keepdims=True)


def make_embedding(enc: str, d: int, theta: np.ndarray | None = None, *, rng=None):
    """The encoder family of a setting; ``theta`` (possibly zero-padded to N_PARAMS_MAX) or a random start."""
    if enc == "lin":
        if theta is None:
            return LinearEmbedding.random(P, d, rng=rng)
        return LinearEmbedding.from_vector(theta[: P * d], P, d)
    if enc == "mlp":
        if theta is None:
            return TwoLayerEmbedding.random(P, d, HIDDEN, rng=rng)
        return TwoLayerEmbedding.from_vector(theta[: TwoLayerEmbedding.n_params_for(P, d, HIDDEN)], P, d, HIDDEN)
    raise ValueError(f"'encoder' must be 'lin' or 'mlp', got {enc!r}")


def exact_constants(f: np.ndarray, log_w: np.ndarray, tau: float, ks: np.ndarray | None = None) -> dict:
    """Exact per-atom and population constants of (pi_N uniform over the rows, M_N = exp(log_w)).

    Parameters
    ----------
    f : (N, d) embedded atoms (unit rows); log_w : (N, N) log M_N(x_i, x_j), rows summing to 1;
    tau : temperature; ks : grid of k for the exact gap curve (optional: it costs
    ~N x (nodes x N) per curve).

    Returns
    -------
    dict with per-atom ``log_z``, ``log_z2``, ``log_m1`` and population ``ce``, ``c1``, ``c2``,
    ``rho`` = E[Z2/Z^2], ``mbar`` = E[m1/Z] and (with ks) ``gap_exact`` over ks.

    Notes
    -----
    Z = mean_j e^{s_ij}, Z2, Z3 with 2s, 3s; m1 = sum_j w_ij e^{s_ij}; CE = mean_i(-sum_j w_ij s_ij
    + log Z_i); c1 = E[m1/Z - (Z2/Z^2 - 1)/2]; per anchor c2 = -E[W0^2]/2 + k3/3 + v E[W0] - 3 v^2/4
    with W0 = e^{s0}/Z, v = Z2/Z^2 - 1, k3 = Z3/Z^3 - 3 Z2/Z^2 + 2 (simkit.diagnose); the exact
    gap per anchor is log1p(m1/(kZ)) + E log(Y_k / E Y_k) (simkit.exact.curve.expected_log_sum_parts).
    """
    n = f.shape[0]
    s = f @ f.T / tau
    log_n = math.log(n)
    log_z = logsumexp(s, axis=1) - log_n
    log_z2 = logsumexp(2 * s, axis=1) - log_n
    log_z3 = logsumexp(3 * s, axis=1) - log_n
    log_m1 = logsumexp(log_w + s, axis=1)
    log_e_w0sq = logsumexp(log_w + 2 * s, axis=1) - 2 * log_z
    w = np.exp(log_w)
    ce_i = -np.sum(w * s, axis=1) + log_z
    e_w0 = np.exp(log_m1 - log_z)
    v = np.expm1(log_z2 - 2 * log_z)
    k3 = np.exp(log_z3 - 3 * log_z) - 3 * np.exp(log_z2 - 2 * log_z) + 2
    c1_i = e_w0 - v / 2
    c2_i = -np.exp(log_e_w0sq) / 2 + k3 / 3 + v * e_w0 - 0.75 * v * v
    out = {"log_z": log_z, "log_z2": log_z2, "log_m1": log_m1, "ce": float(np.mean(ce_i)), "c1": float(np.mean(c1_i)),
           "c2": float(np.mean(c2_i)), "rho": float(np.mean(np.exp(log_z2 - 2 * log_z))), "mbar": float(np.mean(e_w0))}
    if ks is not None:
        kf = np.asarray(ks, dtype=float)
        neg_w = np.full(n, 1.0 / n)
        gap = np.zeros(kf.size)
        step = 16
        for lo in range(0, n, step):
            sl = slice(lo, min(n, lo + step))
            _, centred = expected_log_sum_parts(s[sl], w[sl], s[sl], np.broadcast_to(neg_w, s[sl].shape), kf)
            gap += np.sum(np.log1p(np.exp(log_m1[sl] - log_z[sl])[:, None] / kf[None, :]) + centred, axis=0)
        out["gap_exact"] = gap / n
    return out


def sample_rows(log_w_rows: np.ndarray, rng) -> np.ndarray:
    """One index per row from the categorical laws exp(log_w_rows) (inverse CDF)."""
    cdf = np.cumsum(np.exp(log_w_rows), axis=1)
    u = rng.random(log_w_rows.shape[0]) * cdf[:, -1]
    return np.minimum(np.sum(cdf < u[:, None], axis=1), log_w_rows.shape[1] - 1)


def block_terms(f: np.ndarray, log_w_rows: np.ndarray, anchors: np.ndarray, pos: np.ndarray, neg: np.ndarray,
                log_z: np.ndarray, log_z2: np.ndarray, log_m1: np.ndarray, tau: float, grid: np.ndarray) -> dict:
    """Per-block means of the C1 and C2 estimators at one embedding (scores f_i . f_j / tau).

    ``log_w_rows``: log M_N rows of the anchors; ``pos``: positive atom per anchor; ``neg``: the
    block's k_max shared negative atoms; ``log_z`` etc.: exact per-atom constants (indexed by atom).
    Returns block means over anchors of gap_cv, gap_plain, loss, dgap, dgap_cv (over the grid),
    d2 (the C2 difference l_k - CE(M_hat_k, Q_hat_k)) and ell_inf.
    """
    fa = f[anchors]
    s0 = np.sum(fa * f[pos], axis=1) / tau
    sn = fa @ f[neg].T / tau  # (B, K)
    lz, lz2, lm1 = log_z[anchors], log_z2[anchors], log_m1[anchors]
    kf = grid.astype(float)
    idx = grid - 1
    e_n = np.exp(sn - lz[:, None])
    cum = np.cumsum(e_n, axis=1)  # S_k / Z
    sk = cum[:, idx]
    e0 = np.exp(s0 - lz)
    a = sk / kf - 1.0
    u = sk / kf + e0[:, None] / kf
    near = np.abs(u - 1.0) < 0.5
    d_k = np.log(np.where(near, 1.0, u))
    d_k[near] = np.log1p((a + e0[:, None] / kf)[near])  # log1p where A_k carries the digits
    v = np.expm1(lz2 - 2.0 * lz)
    c = a * a - v[:, None] / kf
    b = (e0 - np.exp(lm1 - lz))[:, None] / kf
    g = d_k - a - b + 0.5 * c  # Taylor coefficients (1, 1, -1/2) of simkit.estimators.infonce
    loss = np.log(e0[:, None] + sk) + (lz - s0)[:, None]
    n_g = grid.size
    dd = np.full((anchors.size, n_g), np.nan)
    e = np.full((anchors.size, n_g), np.nan)
    dd[:, :-1] = d_k[:, :-1] - d_k[:, 1:]
    k_all = kf[-1]
    for i in range(n_g - 2):  # Z_rest from negatives 2k+1..K: independent of the first 2k given x
        z_rest = (sk[:, -1] - sk[:, i + 1]) / (k_all - kf[i + 1])
        e[:, i] = (sk[:, i] / kf[i] - sk[:, i + 1] / kf[i + 1]) / z_rest
    # C2: CE(M_hat_k, Q_hat_k) = -sum_j M_j s_j / sum_j M_j + log sum_j e^{s_j} (prefix sums over the database)
    lwn = np.take_along_axis(log_w_rows, np.broadcast_to(neg, sn.shape), axis=1)
    mw = np.exp(lwn - lwn.max(axis=1, keepdims=True))
    cm = np.cumsum(mw, axis=1)[:, idx]
    cms = np.cumsum(mw * sn, axis=1)[:, idx]
    ce_k = -cms / cm + np.log(sk) + lz[:, None]
    # control variates with exactly zero mean given x: (i) E_{M_N(x)}[s] - s0 (s_bar = sum_j w_xj s_xj exact);
    # (ii) the linearised ratio term (1/k) sum_{j<=k} m(x, y_j) (s_j - s_bar), m = N w the density of M_N
    # w.r.t. pi_N (E_pi m (s - s_bar) = E_M s - s_bar = 0); (iii) B_k = (e^{s0} - m1)/(k Z)
    s_bar = np.sum(np.exp(log_w_rows) * (fa @ f.T), axis=1) / tau
    dens = np.exp(lwn + math.log(log_w_rows.shape[1]))
    f_k = np.cumsum(dens * (sn - s_bar[:, None]), axis=1)[:, idx] / kf
    d2 = loss - ce_k - (s_bar - s0)[:, None] - f_k - b
    with np.errstate(invalid="ignore"):
        dgap = np.mean(dd, axis=0)
        dgap_cv = np.mean(dd - e, axis=0)
    out = {"gap_cv": g.mean(axis=0), "gap_plain": d_k.mean(axis=0), "loss": loss.mean(axis=0), "dgap": dgap,
           "dgap_cv": dgap_cv, "d2": d2.mean(axis=0), "ell_inf": np.array(float(np.mean(lz - s0)))}
    for name, val in out.items():
        finite = np.isfinite(val)
        if name in ("dgap", "dgap_cv"):
            finite = finite[: n_g - 2]
        if not np.all(finite):
            raise FloatingPointError(f"block estimator {name!r} is not finite")
    return out


def retrieval_terms(f: np.ndarray, log_w_rows: np.ndarray, anchors: np.ndarray, db: np.ndarray, tau: float) -> dict:
    """Block means of CE(M_hat, Q_hat), top-1 agreement and recall@10 at a database ``db`` of atoms."""
    sc = f[anchors] @ f[db].T / tau
    lw = np.take_along_axis(log_w_rows, np.broadcast_to(db, sc.shape), axis=1)
    lq = sc - logsumexp(sc, axis=1, keepdims=True)
    m = np.exp(lw - logsumexp(lw, axis=1, keepdims=True))
    ce = -np.sum(m * lq, axis=1)
    ideal = np.argmax(lw, axis=1)
    top1 = np.argmax(sc, axis=1) == ideal
    s_ideal = np.take_along_axis(sc, ideal[:, None], axis=1)[:, 0]
    rank = np.sum(sc > s_ideal[:, None], axis=1)  # points scoring above the ideal one
    return {"ce": float(np.mean(ce)), "top1": float(np.mean(top1)), "recall10": float(np.mean(rank < 10))}


#: every variable and coordinate of the dataset
SCHEMA = {
    **{f"raw_{n}": _v(("setting", "block", "k"), f"per-block {n}, in nats", "per-block mean over anchors "
                      "(studies.encoders.block_terms); " + NATS) for n in ("gap_cv", "gap_plain", "loss", "dgap",
                                                                          "dgap_cv", "d2")},
    "raw_ell_inf": _v(("setting", "block"), "per-block mean of l_inf = -s(x,x+) + log Z(x), in nats", NATS),
    **{f"raw_ret_{n}": _v(("setting", "block", "ckpt"), f"per-block retrieval {n} along training",
                          "at a database of k_ret atoms, the same anchors and database at every checkpoint"
                          + ("; in nats" if n == "ce" else "")) for n in ("ce", "top1", "recall10")},
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
        ("c1_ckpt", "exact c1 at the checkpoint, in nats"),
        ("iterations", "L-BFGS iterations actually made"))},
    "gap": _v(K, "finite-k gap R_k - log k - CE, in nats", "block mean of the control-variate estimator G_k"),
    "gap_mcse": _v(K, "Monte Carlo standard error of gap, in nats", "sd over blocks / sqrt(n_blocks)"),
    "gap_plain": _v(K, "gap without control variates, in nats", "block mean of D_k"),
    "gap_plain_mcse": _v(K, "MCSE of gap_plain, in nats", "sd over blocks / sqrt(n_blocks)"),
    "gap_exact": _v(K, "exact gap at phi_hat, in nats", "expected_log_sum_parts at every atom"),
    "dgap_exact": _v(K, "exact gap_k - gap_2k, in nats", "from gap_exact; NaN where 2k is off the grid"),
    "k_gap": _v(K, "k times gap, in nats", "approaches c1 as k grows"),
    "k_gap_mcse": _v(K, "MCSE of k_gap, in nats", "k * gap_mcse"),
    "loss": _v(K, "InfoNCE risk R_k at phi_hat, in nats", "block mean of l_k"),
    "loss_mcse": _v(K, "MCSE of loss, in nats", "sd over blocks / sqrt(n_blocks)"),
    "dgap": _v(K, "gap_k - gap_2k, in nats", "Z-free: D_k - D_2k with an exactly centred control variate (k <= K/4)"),
    "dgap_mcse": _v(K, "MCSE of dgap, in nats", "sd over blocks / sqrt(n_blocks)"),
    "d2": _v(K, "C2 curve D_k = R_k - E CE(M_hat_k, Q_hat_k), in nats", "block mean, same tuples as gap (CRN), of "
             "l_k - CE(M_hat_k, Q_hat_k) minus three exactly centred control variates (block_terms)"),
    "d2_mcse": _v(K, "MCSE of d2, in nats", "sd over blocks / sqrt(n_blocks)"),
    "fit_gap": _v(K, "fitted gap, in nats", "exp of the WLS fit of log gap on log k and 1/k"),
    "resid_rate": _v(K, "standardised residual of the rate fit", "only k >= k_min enter the fit"),
    "ce_exact": _v(S, "exact cross-entropy CE(M, Q) at phi_hat, in nats", "finite sum over pi_N and M_N"),
    "ce_estimate": _v(S, "Monte Carlo CE at phi_hat, in nats", "block mean of l_inf"),
    "ce_estimate_mcse": _v(S, "MCSE of ce_estimate, in nats", "sd over blocks / sqrt(n_blocks)"),
    "c1_exact": _v(S, "exact c1 at phi_hat, in nats", "E[m1/Z - (Z2/Z^2 - 1)/2], finite sums (MCSE 0)"),
    "c2_exact": _v(S, "exact c2 at phi_hat, in nats", "second-order constant (simkit.diagnose formula), finite sums"),
    "expansion_scale": _v(S, "expansion scale", "max(E[Z2/Z^2], E[m1/Z]) at phi_hat"),
    "slope": _v(S, "log-log slope of gap_k", "WLS of log gap on log k and 1/k over k >= k_min"),
    "slope_se": _v(S, "jackknife standard error of slope", "delete-one-block jackknife"),
    "slope_ci_low": _v(S, "95% interval for slope, lower", "Student t, n_blocks - 1 df, jackknife SE"),
    "slope_ci_high": _v(S, "95% interval for slope, upper", "Student t, n_blocks - 1 df, jackknife SE"),
    "slope_p_half": _v(S, "p-value of slope = -1/2 (the 1/sqrt(k) alternative)", "two-sided t test, jackknife SE"),
    "slope_p_one": _v(S, "p-value of slope = -1", "two-sided t test, jackknife SE"),
    "slope_verdict_low": _v(S, "verdict interval for slope, lower", f"level 1 - {ALPHA:g}"),
    "slope_verdict_high": _v(S, "verdict interval for slope, upper", f"level 1 - {ALPHA:g}"),
    "c1_estimate": _v(S, "estimated c1, in nats", "WLS of gap on 1/k and 1/k^2 over k >= k_min"),
    "c1_estimate_mcse": _v(S, "MCSE of c1_estimate, in nats", "delete-one-block jackknife"),
    "c2_estimate": _v(S, "estimated c2, in nats", "coefficient of 1/k^2"),
    "c2_estimate_mcse": _v(S, "MCSE of c2_estimate, in nats", "delete-one-block jackknife"),
    "c1_z": _v(S, "standardised difference of c1_estimate from c1_exact", "Student t on n_blocks - 1 df"),
    "k_min": _v(S, "smallest k in the fits", "smallest grid k >= k_min_factor * expansion_scale"),
    "c2_t": _v(S, "standardised difference of c2_estimate from c2_exact", "Student t on n_blocks - 1 df"),
    "curve_max_t": _v(S, "largest studentised deviation of the Monte Carlo gap curve from the exact curve",
                      "simkit.stats.truth_tests.max_t_test"),
    "curve_p": _v(S, "p-value of curve_max_t", "Efron bootstrap of the blocks, 9999 resamples (simkit.stats.analysis.truth_rng)"),
    "dgap_max_t": _v(S, "largest studentised deviation of dgap from the exact dgap", "simkit.stats.truth_tests.dgap_test"),
    "dgap_p": _v(S, "p-value of dgap_max_t", "as curve_p"),
    "verdict": _v(S, "verdict for C1 at phi_hat", f"pass when the level-{1 - ALPHA:g} slope interval contains -1, "
                  f"slope = -1/2 is rejected at {ALPHA:g}, c1 and c2 agree with exact, and the curve and dgap "
                  f"agree with the exact ones (each at {ALPHA:g})"),
    "verdict_reason": _v(S, "why C1 failed in a setting", "empty when it passed"),
    "d2_slope": _v(S, "log-log slope of D_k", "rate_verdict on the D_k blocks (no constant tested)"),
    "d2_slope_se": _v(S, "jackknife SE of d2_slope", "delete-one-block jackknife"),
    "d2_slope_p_half": _v(S, "p-value of D_k slope = -1/2", "two-sided t test, jackknife SE"),
    "d2_k_min": _v(S, "smallest k in the D_k fit", "as k_min"),
    "d2_verdict": _v(S, "verdict for the C2 rate of D_k", "rate_verdict: -1 in the level-(1 - alpha) interval, "
                     "-1/2 rejected"),
    "d2_verdict_reason": _v(S, "why the D_k rate failed", "empty when it passed"),
    **{f"ret_{n}": _v(C, f"retrieval {d} along training", "mean over blocks" + ("; in nats" if n == "ce" else ""))
       for n, d in (("ce", "CE(M_hat, Q_hat)"), ("top1", "top-1 agreement"), ("recall10", "recall@10"))},
    **{f"ret_{n}_mcse": _v(C, f"MCSE of ret_{n}", "sd over blocks / sqrt(n_blocks)") for n in ("ce", "top1", "recall10")},
    **{f"ret_{n}_diff": _v(S, f"last minus first checkpoint of retrieval {n}", "paired over blocks"
                           + ("; in nats" if n == "ce" else "")) for n in ("ce", "top1", "recall10")},
    **{f"ret_{n}_diff_mcse": _v(S, f"MCSE of ret_{n}_diff", "sd of paired block differences / sqrt(n_blocks)")
       for n in ("ce", "top1", "recall10")},
    "ret_top1_p": _v(S, "one-sided p-value of no top-1 improvement", "paired t, n_blocks - 1 df"),
    "ret_ce_p": _v(S, "one-sided p-value of no fall of CE(M_hat, Q_hat)", "paired t, n_blocks - 1 df"),
    "ret_spearman": _v(S, "Spearman correlation of training risk and top-1 over checkpoints", "descriptive; "
                       "-1 when top-1 rises exactly as the risk falls"),
    "ret_verdict": _v(S, "verdict for 'InfoNCE learns retrieval'", f"pass when the training risk fell and both "
                      f"one-sided paired tests (top-1, CE) reject at {ALPHA:g}"),
    "ret_verdict_reason": _v(S, "why the retrieval test failed", "empty when it passed"),
    "ckpt": _v(("ckpt",), "L-BFGS iterations at the checkpoint", "maximum iterations of train() from the same start"),
    "k": _v(("k",), "number of negatives k", "geometric grid 1, 2, 4, ..., k_max"),
    "setting": _v(S, "design setting", "<encoder>-d<d>-<kernel>: lin/mlp, output dimension, vmf/rot kernel"),
    "encoder": _v(S, "encoder family", f"lin (LinearEmbedding) or mlp (TwoLayerEmbedding, tanh, {HIDDEN} hidden)"),
    "dim": _v(S, "embedding dimension d", "phi: S^2 -> S^{d-1}"),
    "kernel": _v(S, "positive kernel", f"vmf: vMF(x, {KAPPA_M:g}); rot: vMF(Rx, {KAPPA_M:g}), R a plane rotation "
                 f"by {ANGLE:.4f} rad; Discrete approximation over the atoms"),
}


def _c1_check(ds, rows=None) -> dict:
    sel = np.arange(ds.sizes["setting"]) if rows is None else rows
    slope, se = ds["slope"].values[sel], ds["slope_se"].values[sel]
    worst = worst_slope(slope, se)
    v = [str(ds["verdict"].values[i]) for i in sel]
    detail = "; ".join(f"{ds['setting'].values[i]}: slope {ds['slope'].values[i]:.4f} ± {ds['slope_se'].values[i]:.4f},"
                       f" c1 z {ds['c1_z'].values[i]:+.2f} -> {ds['verdict'].values[i]}"
                       + (f" ({ds['verdict_reason'].values[i]})" if str(ds["verdict_reason"].values[i]) else "")
                       for i in sel)
    return {"estimate": slope[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(v), "detail": detail}


def _rot(ds) -> np.ndarray:
    return np.array([i for i, k in enumerate(ds["kernel"].values) if str(k) == "rot"], dtype=int)


def _c2_check(ds) -> dict:
    slope, se = ds["d2_slope"].values, ds["d2_slope_se"].values
    worst = worst_slope(slope, se)
    v = [str(x) for x in ds["d2_verdict"].values]
    detail = "; ".join(f"{s}: D_k slope {slope[i]:.4f} ± {se[i]:.4f} -> {v[i]}"
                       for i, s in enumerate(ds["setting"].values))
    return {"estimate": slope[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(v), "detail": detail}


def _ret_check(ds) -> dict:
    d, se = ds["ret_top1_diff"].values, ds["ret_top1_diff_mcse"].values
    worst = int(np.nanargmin(d / se)) if np.any(np.isfinite(d / se)) else 0
    v = [str(x) for x in ds["ret_verdict"].values]
    detail = "; ".join(f"{s}: top-1 {ds['ret_top1'].values[i, 0]:.3f} -> {ds['ret_top1'].values[i, -1]:.3f} "
                       f"(p {ds['ret_top1_p'].values[i]:.2g}), CE p {ds['ret_ce_p'].values[i]:.2g} -> {v[i]}"
                       for i, s in enumerate(ds["setting"].values))
    return {"estimate": d[worst], "estimate_mcse": se[worst], "verdict": combine_verdicts(v), "detail": detail}


def _c7_check(ds) -> dict:
    rows = _rot(ds)
    if rows.size == 0:
        return {"estimate": math.nan, "estimate_mcse": math.nan, "verdict": "error", "detail": "no rotated-kernel setting"}
    out = _c1_check(ds, rows)
    v = [out["verdict"], *(str(ds["d2_verdict"].values[i]) for i in rows), *(str(ds["ret_verdict"].values[i])
                                                                               for i in rows)]
    out["verdict"] = combine_verdicts(v)
    out["detail"] += "; D_k and retrieval: " + ", ".join(
        f"{ds['setting'].values[i]} {ds['d2_verdict'].values[i]}/{ds['ret_verdict'].values[i]}" for i in rows)
    return out


def _c1_pvalues(ds) -> dict:
    n = ds.sizes["block"]
    out = {}
    for i, s in enumerate(ds["setting"].values):
        t = (ds["slope"].values[i] + 1.0) / ds["slope_se"].values[i]
        for name, z in (("slope", t), ("c1", ds["c1_z"].values[i]), ("c2", ds["c2_t"].values[i])):
            out[f"{s}:{name}"] = (float(2 * stats.t.sf(abs(z), n - 1)), ALPHA)
        out[f"{s}:curve"] = (float(ds["curve_p"].values[i]), ALPHA)
        out[f"{s}:dgap"] = (float(ds["dgap_p"].values[i]), ALPHA)
    return out


CHECKS = (
    Check("C1", lambda ds: (f"at InfoNCE-trained encoders, {ds.sizes['setting']} settings: slope of log gap_k on log k "
                            f"(with 1/k term); -1 in the level-{1 - ALPHA:g} interval, -1/2 (1/sqrt(k)) rejected, c1 and "
                            f"c2 against their exact values at phi_hat, MC curve and Z-free dgap against the exact "
                            f"curve (max |t|, bootstrap reference)"),
          _c1_check, lambda ds: 1.0 - (1.0 - N_C1_TESTS * ALPHA) ** ds.sizes["setting"], _c1_pvalues),
    Check("C2", lambda ds: (f"at trained encoders, {ds.sizes['setting']} settings: slope of log D_k, D_k = R_k - "
                            f"E CE(M_hat_k, Q_hat_k); -1 in the level-{1 - ALPHA:g} interval, -1/2 rejected"),
          _c2_check, lambda ds: 1.0 - (1.0 - ALPHA) ** ds.sizes["setting"]),
    Check("C2", lambda ds: ("InfoNCE learns retrieval (pre-stated): along training the risk falls and, paired over "
                            f"blocks, top-1 agreement of Q_hat with M_hat rises and CE(M_hat, Q_hat) falls from the "
                            f"first to the last checkpoint (one-sided paired t, {ALPHA:g} each), "
                            f"{ds.sizes['setting']} settings; tests that must reject: {ALPHA:g} is their false-pass "
                            f"rate, and no false-failure rate is stated (no power was planned)"),
          _ret_check, None),
    Check("C7", lambda ds: ("C1 (as above), the D_k rate and retrieval at trained encoders under the non-reversible "
                            "rotated kernel vMF(Rx, kappa); stated rate: the C1 and D_k tests only (retrieval must "
                            "reject, so it has a false-pass rate and no stated false-failure rate)"),
          _c7_check, lambda ds: 1.0 - (1.0 - (N_C1_TESTS + 1) * ALPHA) ** max(1, int(_rot(ds).size))),
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
        phi = init
        for c in CHECKPOINTS:
            if c == 0:
                phi, it = init, 0
            else:
                res = train(risk, init, maxiter=c)
                phi, it = res.embedding, res.report.iterations
            th = np.zeros(N_PARAMS_MAX)
            th[: phi.n_params] = phi.params
            thetas.append(th)
            risks.append(risk.value(phi))
            ex = exact_constants(phi(atoms), log_w, TAU)
            ces.append(ex["ce"])
            c1s.append(ex["c1"])
            iters.append(it)
        ex = exact_constants(phi(atoms), log_w, TAU, k_grid(cfg["k_max"]))
        out = {"atoms": atoms, "theta": np.array(thetas), "log_z": ex["log_z"], "log_z2": ex["log_z2"],
               "log_m1": ex["log_m1"], "c1_exact": ex["c1"], "c2_exact": ex["c2"], "ce_exact": ex["ce"],
               "rho": ex["rho"], "mbar": ex["mbar"], "gap_exact": ex["gap_exact"], "train_risk": np.array(risks),
               "ce_ckpt": np.array(ces), "c1_ckpt": np.array(c1s), "iterations": np.array(iters, dtype=float)}
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
        return out

    def summarise(self, raw, cfg) -> dict:
        k = raw["k"].values
        n_s = raw.sizes["setting"]
        out = {}
        for name, var in (("gap", "gap_cv"), ("gap_plain", "gap_plain"), ("loss", "loss"), ("dgap", "dgap_cv"),
                          ("d2", "d2")):
            out[name], out[f"{name}_mcse"] = mean_mcse(raw[f"raw_{var}"].values, axis=1)
        out["ce_estimate"], out["ce_estimate_mcse"] = mean_mcse(raw["raw_ell_inf"].values, axis=1)
        out["k_gap"], out["k_gap_mcse"] = out["gap"] * k, out["gap_mcse"] * k
        scale = np.maximum(raw["prep_rho"].values, raw["prep_mbar"].values)
        out["expansion_scale"] = scale
        for name in ("c1_exact", "c2_exact", "ce_exact", "gap_exact"):
            out[name] = raw[f"prep_{name}"].values
        out["dgap_exact"] = np.full((n_s, k.size), np.nan)
        out["dgap_exact"][:, :-1] = out["gap_exact"][:, :-1] - out["gap_exact"][:, 1:]
        failed = [bool(str(raw["cell_error"].values[i])) for i in range(n_s)]
        renamed = {"const_estimate": "c1_estimate", "const_estimate_mcse": "c1_estimate_mcse",
                   "const2_estimate": "c2_estimate", "const2_estimate_mcse": "c2_estimate_mcse", "const_z": "c1_z",
                   "fit_abs": "fit_gap", "reason": "verdict_reason"}
        rows = [rate_verdict(k, raw["raw_gap_cv"].values[i], float(scale[i]), cfg["k_min_factor"],
                             float(out["c1_exact"][i]), 0.0, alpha=ALPHA, test_constant=True,
                             failed_blocks=failed[i]) for i in range(n_s)]
        for field in (*RATE_FIELDS, "fit_abs", "resid_rate", "verdict", "reason"):
            name = renamed.get(field, field)
            if name in SCHEMA:
                out[name] = [r[field] for r in rows]
        for name in TRUTH_FIELDS_MAX_T:
            out[name] = np.full(n_s, np.nan)
        for i, r in enumerate(rows):
            fields, problems = truth_verdict(k, raw["raw_gap_cv"].values[i], raw["raw_dgap_cv"].values[i],
                                             out["gap_exact"][i], None, (out["c2_estimate"][i],
                                                                         out["c2_estimate_mcse"][i]),
                                             (out["c2_exact"][i], 0.0), alpha=ALPHA, reference="max-t",
                                             rng=truth_rng(cfg["seed"], str(raw["setting"].values[i])))
            for name, val in fields.items():
                out[name][i] = val
            if r["verdict"] == "error" or not np.isfinite(r["slope"]):
                continue
            problems = [p for p in (r["reason"], *problems) if p]
            out["verdict"][i] = "pass" if not problems else "fail"
            out["verdict_reason"][i] = "; ".join(problems)
        d2rows = [rate_verdict(k, raw["raw_d2"].values[i], float(scale[i]), cfg["k_min_factor"], math.nan, 0.0,
                               alpha=ALPHA, test_constant=False, failed_blocks=failed[i]) for i in range(n_s)]
        for field, name in (("slope", "d2_slope"), ("slope_se", "d2_slope_se"), ("slope_p_half", "d2_slope_p_half"),
                            ("k_min", "d2_k_min"), ("verdict", "d2_verdict"), ("reason", "d2_verdict_reason")):
            out[name] = [r[field] for r in d2rows]
        self._retrieval(raw, out)
        return out

    @staticmethod
    def _retrieval(raw, out) -> None:
        """The pre-stated retrieval test (module docstring; docs/design.md, "studies/encoders")."""
        n_s, n_b = raw.sizes["setting"], raw.sizes["block"]
        for name in ("ce", "top1", "recall10"):
            blocks = raw[f"raw_ret_{name}"].values  # (setting, block, ckpt)
            out[f"ret_{name}"], out[f"ret_{name}_mcse"] = mean_mcse(blocks, axis=1)
            out[f"ret_{name}_diff"], out[f"ret_{name}_diff_mcse"] = mean_mcse(blocks[:, :, -1] - blocks[:, :, 0], axis=1)
        tcdf = lambda d, se: stats.t.sf(d / se, n_b - 1) if se > 0 else (0.0 if d > 0 else 1.0)  # noqa: E731
        out["ret_top1_p"] = np.array([tcdf(out["ret_top1_diff"][i], out["ret_top1_diff_mcse"][i]) for i in range(n_s)])
        out["ret_ce_p"] = np.array([tcdf(-out["ret_ce_diff"][i], out["ret_ce_diff_mcse"][i]) for i in range(n_s)])
        risk = raw["prep_train_risk"].values
        out["ret_spearman"] = np.array([stats.spearmanr(risk[i], out["ret_top1"][i]).statistic
                                        if np.ptp(out["ret_top1"][i]) > 0 else np.nan for i in range(n_s)])
        verdicts, reasons = [], []
        for i in range(n_s):
            problems = []
            if not np.all(np.isfinite(risk[i])) or not np.all(np.isfinite(out["ret_top1"][i])):
                verdicts.append("error")
                reasons.append("preparation or blocks failed (see cell_error)")
                continue
            if not risk[i, -1] < risk[i, 0]:
                problems.append(f"training risk did not fall ({risk[i, 0]:.4f} -> {risk[i, -1]:.4f})")
            if not out["ret_top1_p"][i] < ALPHA:
                problems.append(f"top-1 improvement not shown (diff {out['ret_top1_diff'][i]:+.4f}, "
                                f"p = {out['ret_top1_p'][i]:.3g})")
            if not out["ret_ce_p"][i] < ALPHA:
                problems.append(f"CE(M_hat, Q_hat) fall not shown (diff {out['ret_ce_diff'][i]:+.4f}, "
                                f"p = {out['ret_ce_p'][i]:.3g})")
            verdicts.append("pass" if not problems else "fail")
            reasons.append("; ".join(problems))
        out["ret_verdict"], out["ret_verdict_reason"] = verdicts, reasons

    def attrs(self, cfg):
        return {"alpha": ALPHA, "tau": TAU, "kappa_pi": KAPPA_PI, "kappa_m": KAPPA_M, "rotation_angle": ANGLE,
                "hidden": HIDDEN, "mixture_weights": list(MIXTURE_WEIGHTS), "mixture_seed": MIXTURE_SEED,
                "checkpoints": list(CHECKPOINTS),
                "route": "pi_N = N atoms of the vMF mixture (prepare rng), M_N = Discrete importance-weight "
                         "approximation of the kernel: Z, CE, c1, c2 and the gap curve exact for any phi",
                "retrieval_test": "pre-stated: risk falls; one-sided paired t (blocks) of top-1 rise and "
                                  "CE(M_hat, Q_hat) fall, first vs last checkpoint, alpha each"}

    def report_sections(self, doc, ds):
        from simkit.report.encoders import encoders_sections
        encoders_sections(doc, ds, study=self)

    def summary_text(self, ds) -> str:
        lines = [f"{'setting':<14}{'slope':>16}{'p(-1/2)':>10}{'c1 est':>18}{'c1 exact':>10}{'curve p':>9}"
                 f"{'dgap p':>9}{'D_k slope':>18}{'top1 first->last':>20}{'p':>9}  C1/C2/ret"]
        for i, s in enumerate(ds["setting"].values):
            g = lambda n: ds[n].values[i]  # noqa: E731
            lines.append(f"{s:<14}{g('slope'):>8.3f} ± {g('slope_se'):<5.3f}{g('slope_p_half'):>10.1e}"
                         f"{g('c1_estimate'):>9.3f} ± {g('c1_estimate_mcse'):<6.3f}{g('c1_exact'):>10.3f}"
                         f"{g('curve_p'):>9.3f}{g('dgap_p'):>9.3f}{g('d2_slope'):>10.3f} ± {g('d2_slope_se'):<5.3f}"
                         f"{ds['ret_top1'].values[i, 0]:>11.3f} -> {ds['ret_top1'].values[i, -1]:.3f}"
                         f"{g('ret_top1_p'):>9.1e}  {g('verdict')}/{g('d2_verdict')}/{g('ret_verdict')}")
        return "\n".join(lines)


STUDY = Encoders()
