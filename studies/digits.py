"""Claims C1, C2 and C3 on real data: scikit-learn's handwritten digits.

pi is the uniform law of the 901 *test* images of ``sklearn.datasets.load_digits()`` (a fixed stratified
half-split, normalised onto S^63), so Z(x), Z2(x), m1(x) are finite sums, exact for any encoder. Kernels:
``label`` (same-digit; exact density) and ``augment`` (pixel shifts and noise; sampling only). Encoders:
the normalised pixels, random Fourier features, and an MLP trained by InfoNCE on the train split. The
study estimates gap_k (C1; exact curve and c1 by simkit.diagnose, with control variates of exactly zero
conditional mean), D_k for the label kernel (C2), retrieval against same-digit retrieval, and the
train/test gap G(n, k) of MLPs trained on n tuples with k negatives (C3); rates by
simkit.stats.analysis.rate_verdict (shared with rate_k and search_ce). The ADEMP statement is the class
attribute ``Digits.ademp`` (stored in the dataset); in full: docs/design.md, "studies/digits".

Run it: ``simkit run digits`` (or ``python -m simkit run digits``).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from simkit.stats.analysis import (C1_NAMES, RATE_FIELDS, mean_mcse, rate_columns, rate_verdict, setting_pvalues,
                                   size_slopes, worst_slope)
from simkit.embeddings.embedding import TwoLayerEmbedding
from simkit.estimators.finite import scores_and_log_z
from simkit.exact.finite import class_members
from simkit.runner import Check, Param, Study, Var, block_means, estimate_vars, rate_vars, settings_check
from simkit.embeddings.random_features import fourier_features, fourier_map
from simkit.embeddings.training import EmpiricalRisk, train
from simkit.distributions.digits import SPLIT_SEED, TEST_FRACTION, augmented_views, load_split, training_tuples
from simkit.estimators.labelled import (class_d_block, class_first_order, diagnosed_constants, exact_d_two_phase, gap_block,
                                        population_risk, positive_scores)

#: false-failure rate of each per-setting rate check (slope interval; c1 z-test for C1)
ALPHA = 1e-3
#: seed of the random-feature map (part of the design)
RFF_SEED = 20261202
#: number of random Fourier features and their bandwidth on the unit sphere
RFF_FEATURES = 256
RFF_BANDWIDTH = 0.5

ENCODERS = ("pixels", "rff", "mlp")
KERNELS = ("label", "augment")
SETTINGS = tuple(f"{e}-{m}" for e in ENCODERS for m in KERNELS)


def make_encoder(encoder: str, cfg: dict, theta: NDArray | None = None):
    """phi: unit pixel vectors (n, 64) -> unit embeddings (n, d) for ``pixels``, ``rff`` or ``mlp``
    (the MLP from its flat parameter vector ``theta``)."""
    if encoder == "pixels":
        return lambda u: np.array(u, dtype=float)
    if encoder == "rff":
        w, b = fourier_map(RFF_FEATURES, 64, RFF_BANDWIDTH, RFF_SEED)
        return lambda u: fourier_features(u, w, b)
    if encoder == "mlp":
        return TwoLayerEmbedding.from_vector(theta, 64, cfg["mlp_dim"], cfg["mlp_hidden"])
    raise ValueError(f"'encoder' must be one of {', '.join(ENCODERS)}, got {encoder!r}")


# schema

S, K = ("setting",), ("setting", "k")
C3D = ("setting", "n_train", "k_train")
NATS = "nats (dimensionless, udunits '1')"
MCSE = "sd over blocks / sqrt(n_blocks)"


def _v(dims, long_name, description, units="1"):
    return Var(dims, long_name, units, description)


SCHEMA = {
    # coordinates and design
    "setting": _v(S, "design setting", "encoder-kernel: encoder pixels, rff or mlp; kernel label or augment"),
    "encoder": _v(S, "encoder phi", "pixels (normalised pixels, S^63), rff (random Fourier features from RFF_SEED, "
                  "S^255) or mlp (two-layer tanh network trained by InfoNCE on the train split)"),
    "kernel": _v(S, "positive kernel M", "label: uniform over the test images of x's digit (x included); augment: "
                 "shift by -1/0/+1 pixel per axis and clipped Gaussian pixel noise"),
    "tau": _v(S, "temperature tau", "score s(x, y) = phi(x).phi(y) / tau"),
    "dim": _v(S, "embedding dimension d", "phi maps into S^{d-1}"),
    "k": _v(("k",), "number of negatives k", "geometric grid 1, 2, 4, ..., k_max"),
    "n_train": _v(("n_train",), "training tuples n (C3)", "size of each MLP's training sample"),
    "k_train": _v(("k_train",), "training negatives k (C3)", "negatives per training tuple"),
    # raw blocks
    "raw_gap": _v(("setting", "block", "k"), "per-block gap estimate, in nats", "mean over the block's tuples of "
                  "log((e^{s+} + S_k)/(kZ)) - (S_k/(kZ) - 1); " + NATS),
    "raw_gap_plain": _v(("setting", "block", "k"), "per-block gap without the control variate, in nats",
                        "mean of log((e^{s+} + S_k)/(kZ)); " + NATS),
    "raw_ell_inf": _v(("setting", "block"), "per-block mean of -s(x,x+) + log Z(x), in nats",
                      "Monte Carlo cross-entropy (the positives of the block); " + NATS),
    "raw_d": _v(("setting", "block", "k"), "per-block D_k estimate, in nats", "label kernel: mean over queries of "
                "E_{x+}[log(1 + e^{s+}/S_k)] (positive Rao-Blackwellised over the class; the zero-mean "
                "self-normalised term removed); NaN for the augmentation kernel (no density w.r.t. pi); " + NATS),
    "raw_d_plain": _v(("setting", "block", "k"), "per-block R_k - CE(M_k, Q_k) without control variate, in nats",
                      "E_{x+}[l_k] - (log S_k - V_k/W_k) with the exact per-database CE; NaN for augment; " + NATS),
    "raw_no_match": _v(("setting", "block", "k"), "share of databases without a same-digit item",
                       "queries whose k database points hold no image of the query's digit (M_k undefined; "
                       "V_k/W_k := E_M s there); NaN for augment"),
    "raw_c3_risk_train": _v(("setting", "block", "n_train", "k_train"), "per-block empirical risk R_hat_{n,k} "
                            "of the trained MLP, in nats", "value at the L-BFGS-B solution; NaN for the untrained "
                            "encoders; " + NATS),
    "raw_c3_risk_test": _v(("setting", "block", "n_train", "k_train"), "per-block test risk R_k of the trained "
                           "MLP, in nats", "log k + CE_test + the C1 gap estimator on the test split; NaN for the "
                           "untrained encoders; " + NATS),
    "raw_c3_ce_test": _v(("setting", "block", "n_train", "k_train"), "per-block test CE of the trained MLP, in nats",
                         "exact for label, Monte Carlo (one view per test image) for augment; NaN for the untrained "
                         "encoders; " + NATS),
    "raw_c3_converged": _v(("setting", "block", "n_train", "k_train"), "L-BFGS-B converged (1) or stopped at "
                           "c3_maxiter (0)", "scipy's success flag; NaN for the untrained encoders"),
    # prepared constants
    **{f"prep_{n}": _v(S, f"per-setting constant {n}", "prepare stage (simkit.diagnose on the test embeddings; "
                       "nats for ce, c1, c2, d1)") for n in
       ("ce", "ce_mcse", "c1", "c1_mcse", "c2", "c2_mcse", "scale", "d1", "top1", "top1_mcse", "recall10",
        "recall10_mcse", "fit_risk", "fit_converged", "fit_iterations", "ratio2")},
    "prep_gap_exact": _v(("setting", "gap_exact_dim0"), "exact gap on the k grid, in nats", "prepare stage"),
    "prep_gap_exact_mcse": _v(("setting", "gap_exact_mcse_dim0"), "MCSE of the exact gap, in nats",
                              "prepare stage"),
    "prep_d_exact": _v(("setting", "d_exact_dim0"), "exact D_k on the k grid, in nats", "prepare stage"),
    "prep_d_exact_mcse": _v(("setting", "d_exact_mcse_dim0"), "MCSE of the exact D_k, in nats", "prepare stage"),
    "prep_theta": _v(("setting", "theta_dim0"), "trained MLP parameters", "[W1.ravel(), b1, W2.ravel()] "
                     "(simkit.embeddings.embedding.TwoLayerEmbedding); NaN for the untrained encoders"),
    # C1 summaries
    **estimate_vars("gap", K, "finite-k gap R_k - log k - CE", "block mean of the control-variate estimator",
                    nats=True),
    **estimate_vars("gap_plain", K, "gap without the control variate", "block mean", nats=True),
    **estimate_vars("k_gap", K, "k times gap", "approaches c1 as k grows", nats=True, mcse="k * gap_mcse"),
    **estimate_vars("gap_exact", K, "exact gap", "simkit.diagnose gap_exact: simkit.exact.curve per anchor on a random "
                    "subset of test anchors (two-phase estimator); for augment exact given the sampled views",
                    nats=True, mcse="anchor subsampling (and views for augment)"),
    "gap_z": _v(K, "standardised difference of gap from gap_exact", "(gap - gap_exact) / sqrt(gap_mcse^2 + "
                "gap_exact_mcse^2); a diagnostic, not in the verdict"),
    **estimate_vars("ce", S, "cross-entropy CE(M, Q) on the test split", "simkit.diagnose; exact for label",
                    nats=True, mcse="0 where exact; views for augment"),
    **estimate_vars("ce_estimate", S, "Monte Carlo CE", "block mean of -s(x,x+) + log Z(x)", nats=True),
    **estimate_vars("c1_exact", S, "predicted c1", "E[m1/Z - (Z2/Z^2 - 1)/2] by simkit.diagnose: exact for label, Monte "
                   "Carlo over n_views views per image for augment", nats=True, mcse="0 where exact"),
    **estimate_vars("c2_exact", S, "predicted second-order constant c2", "simkit.diagnose c2",
                    nats=True, mcse="0 where exact"),
    **estimate_vars("c1_estimate", S, "fitted c1", "WLS of gap on 1/k and 1/k^2 over k >= k_min",
                    nats=True, mcse="delete-one-block jackknife"),
    **estimate_vars("c2_estimate", S, "fitted c2", "coefficient of 1/k^2",
                    nats=True, mcse="delete-one-block jackknife"),
    "c1_z": _v(S, "standardised difference of c1_estimate from c1_exact", "compared with Student t on "
               "n_blocks - 1 df"),
    "expansion_scale": _v(S, "expansion scale", "max(E[Z2/Z^2], E[m1/Z]) (simkit.diagnose)"),
    "resid_c1": _v(K, "standardised residual of the c1 fit", "(gap - c1/k - c2/k^2) / gap_mcse"),
    "verdict": _v(S, "verdict for C1", f"pass when the level-{1 - ALPHA:g} slope interval contains -1, slope = -1/2 "
                  f"is rejected at {ALPHA:g} and |c1_z| is within the two-sided level-{ALPHA:g} Student t critical "
                  "value; fail otherwise; error if a task failed"),
    "verdict_reason": _v(S, "why a setting failed C1", "empty when it passed"),
    **rate_vars("gap_k", ALPHA, fit="fit"),
    # C2 summaries
    **estimate_vars("d", K, "D_k = R_k - E CE(M_k, Q_k)", "block mean of raw_d; NaN for augment", nats=True),
    **estimate_vars("d_plain", K, "D_k without the control variate", "block mean of raw_d_plain", nats=True),
    **estimate_vars("d_exact", K, "exact D_k", "simkit.exact.curve.expected_log_sum_parts per anchor (E log(e^{S0} + "
                  "S_k) - E log S_k) on n_exact_d random test anchors, difference estimator with the prediction "
                  "(m1/Z)/k known at every anchor; NaN for augment",
                    nats=True, mcse="anchor subsampling (finite-population correction)"),
    "d_z": _v(K, "standardised difference of d from d_exact", "(d - d_exact) / sqrt(d_mcse^2 + d_exact_mcse^2); "
              "a diagnostic, not in the verdict"),
    "no_match": _v(K, "share of databases without a same-digit item", "block mean of raw_no_match"),
    "d1_exact": _v(S, "predicted d1 = E_x[m1/Z], in nats", "first-order constant of D_k for the label kernel (the "
                   "self-normalised term has mean 0); exact; NaN for augment"),
    **estimate_vars("d1_estimate", S, "fitted d1", "WLS of D_k on 1/k and 1/k^2 over k >= d_k_min",
                    nats=True, mcse="delete-one-block jackknife"),
    "d1_z": _v(S, "standardised difference of d1_estimate from d1_exact", "diagnostic, not in the C2 verdict"),
    "d_verdict": _v(S, "verdict for C2", f"label kernel: pass when the level-{1 - ALPHA:g} slope interval of D_k "
                    f"contains -1 and slope = -1/2 is rejected at {ALPHA:g}; n/a for augment"),
    "d_verdict_reason": _v(S, "why a setting failed C2", "empty when it passed"),
    **rate_vars("D_k", ALPHA, prefix="d_", fit="d_fit"),
    **estimate_vars("top1", S, "top-1 agreement of softmax retrieval with same-digit retrieval", "simkit.diagnose top1 over the "
               "whole test split (anchor excluded); computed for both kernels (same-digit is the ideal retrieval of "
               "the label kernel)", mcse="0: every test image is an anchor"),
    **estimate_vars("recall10", S, "recall@10 of softmax retrieval for same-digit retrieval", "simkit.diagnose recall10",
                    mcse="0: every test image is an anchor"),
    # C3 summaries
    **estimate_vars("c3_gap", C3D, "train/test gap R_k,test - R_hat_{n,k} of the trained MLP", "block mean; NaN for "
                 "the untrained encoders", nats=True, mcse=MCSE + " (training samples, initialisations and the test "
                      "estimator)"),
    **estimate_vars("c3_ce_gap", C3D, "CE_test - (R_hat_{n,k} - log k) of the trained MLP", "the quantity of Theorem 1 "
                    "(C3): sample variability + complexity + the finite-k bias", nats=True),
    **estimate_vars("c3_risk_train", C3D, "empirical risk R_hat_{n,k}", "block mean", nats=True),
    **estimate_vars("c3_risk_test", C3D, "test risk R_k", "block mean", nats=True),
    "c3_converged": _v(C3D, "share of converged trainings", "block mean of raw_c3_converged"),
    "c3_slope_n": _v(("setting", "k_train"), "slope of log c3_gap on log n", "WLS with jackknife SE "
                     "(simkit.stats.analysis.fit_rate without the 1/k term); C3 predicts -1/2 or steeper; NaN with fewer "
                     "than 3 sizes or a non-positive mean gap"),
    "c3_slope_n_se": _v(("setting", "k_train"), "jackknife SE of c3_slope_n", "delete-one-block jackknife"),
}


# checks

def _rate_check(ds, prefix: str, verdict: str, reason: str, what: str) -> dict:
    keep = np.array([i for i, v in enumerate(ds[verdict].values) if str(v) != "n/a"], dtype=int)
    slope, se = (ds[f"{prefix}slope{x}"].values for x in ("", "_se"))
    return settings_check(ds, keep, f"{prefix}slope", keep[worst_slope(slope[keep], se[keep])], verdict,
                          lambda i: f"{what} slope {slope[i]:.4f} ± {se[i]:.4f}", reason)


def _n_label(ds) -> int:
    return int(sum(str(v) != "n/a" for v in ds["d_verdict"].values))


C1_CHECK = Check(
    claim="C1",
    statistic=lambda ds: (f"real data (digits): slope of log gap_k on log k (with 1/k term), {ds.sizes['setting']} "
                          f"encoder x kernel settings on the empirical test-image law; -1 in the level-{1 - ALPHA:g} "
                          "interval, -1/2 rejected, fitted c1 within the Student t critical value of c1"),
    evaluate=lambda ds: _rate_check(ds, "", "verdict", "verdict_reason", "gap"),
    false_fail_rate=lambda ds: 1.0 - (1.0 - 2 * ALPHA) ** ds.sizes["setting"],
    # per setting: the two-sided t test of slope = -1 and the Student t test of c1 against its exact value
    pvalues=lambda ds: setting_pvalues(ds, ALPHA, {"slope": ("p", "slope_p_one"), "c1": ("t", "c1_z")}),
)

C2_CHECK = Check(
    claim="C2",
    statistic=lambda ds: (f"real data (digits): slope of log D_k on log k, D_k = R_k - E CE(M_k, Q_k) with "
                          f"same-digit ideal retrieval, {_n_label(ds)} label-kernel settings; -1 in the "
                          f"level-{1 - ALPHA:g} interval, -1/2 rejected"),
    evaluate=lambda ds: _rate_check(ds, "d_", "d_verdict", "d_verdict_reason", "D"),
    false_fail_rate=lambda ds: 1.0 - (1.0 - ALPHA) ** _n_label(ds),
    # the label-kernel settings only (D_k needs the label kernel): two-sided t test of slope = -1
    pvalues=lambda ds: setting_pvalues(ds, ALPHA, {"d_slope": ("p", "d_slope_p_one")},
                                       keep=[str(v) != "n/a" for v in ds["d_verdict"].values]),
)


def _grid(cfg: dict, name: str) -> list[int]:
    """The C3 sizes of list parameter ``name`` (c3_n or c3_k), ascending."""
    return Digits.params[name].values(cfg[name])


# the study

class Digits(Study):
    name = "digits"
    claim = "C1,C2,C3"
    title = "Claims C1-C3 on real data: handwritten digits, three encoders, two kernels"
    cell_dim = "setting"
    ademp = {
        "aim": "C1 (gap_k = c1/k + O(1/k^2), not 1/sqrt(k)), C2 (D_k = O(1/k)) and C3 (train/test gap against n "
               "and k) on real images and real encoders",
        "data": "sklearn load_digits (1,797 8x8 images), stratified half split from SPLIT_SEED; pi = uniform over "
                "the test images on S^63; kernels same-digit and augmentation (shifts, pixel noise); encoders "
                "normalised pixels, random Fourier features (RFF_SEED), two-layer MLP trained by InfoNCE on the "
                "train split",
        "estimand": "gap_k and D_k on a geometric k grid, their log-log slopes, c1; train/test gap G(n, k)",
        "methods": "simkit.diagnose for the exact CE, c1, c2, exact gap curve and retrieval metrics; Monte Carlo "
                   "gap with an exactly zero-mean control variate, D_k with exact per-database CE; "
                   "simkit.stats.analysis.rate_verdict; simkit.embeddings.training.train for the MLPs",
        "performance": "slope with 95% CI, p of slope = -1/2, c1 z-score, D_k slope, top-1 and recall@10, G with "
                       "MCSE; MCSE of every estimate",
    }
    schema = SCHEMA
    checks = (C1_CHECK, C2_CHECK)
    params = {
        "settings": Param("settings", str, ",".join(SETTINGS), "comma-separated encoder-kernel settings",
                          choices=SETTINGS, multi=True),
        "k_max": Param("k_max", int, 2048, "negatives per tuple (power of two); grid 1, 2, ..., k_max", low=16,
                       high=1 << 16, power_of_two=True, quick=1024),
        "n_blocks": Param("n_blocks", int, 16, "independent replicate blocks per setting", low=4, high=10000,
                          quick=8),
        "tuples_per_anchor": Param("tuples_per_anchor", int, 2, "tuples per test image and block", low=1, high=64,
                                   quick=1),
        "tau_pixels": Param("tau_pixels", float, 0.3, "temperature of the pixel encoder", low=0.05),
        "tau_rff": Param("tau_rff", float, 0.3, "temperature of the random-feature encoder", low=0.05),
        "tau_mlp": Param("tau_mlp", float, 0.5, "temperature of the MLP (training and evaluation)", low=0.05),
        "aug_noise": Param("aug_noise", float, 1.0, "sd of the augmentation's pixel noise (pixel values 0..16)",
                           low=0.0, high=16.0),
        "n_views": Param("n_views", int, 32, "sampled views per image for the augmentation kernel's c1, CE and "
                         "exact curve", low=2, high=1024, quick=8),
        "n_exact_anchors": Param("n_exact_anchors", int, 256, "test anchors with an exact gap curve", low=3,
                                 high=1000, quick=24),
        "n_exact_d": Param("n_exact_d", int, 64, "test anchors with an exact D_k curve (label kernel)", low=2,
                           high=1000, quick=8),
        "mlp_hidden": Param("mlp_hidden", int, 16, "hidden width of the MLP", low=1, high=1024),
        "mlp_dim": Param("mlp_dim", int, 8, "output dimension of the MLP", low=2, high=1024),
        "fit_n": Param("fit_n", int, 1024, "training tuples of the evaluated MLP", low=8, high=1 << 16, quick=256),
        "fit_k": Param("fit_k", int, 16, "negatives per training tuple of the evaluated MLP", low=1, high=4096,
                       quick=8),
        "fit_maxiter": Param("fit_maxiter", int, 200, "L-BFGS-B iterations of the evaluated MLP", low=1,
                             high=100000, quick=60),
        "c3_n": Param("c3_n", int, "32,64,128,256", "C3 training sizes n (comma-separated)", quick="32,128", multi=True,
                      low=1, items_doc="integers >= 1"),
        "c3_k": Param("c3_k", int, "2,8,32", "C3 training negatives k (comma-separated)", quick="4", multi=True, low=1,
                      items_doc="integers >= 1"),
        "c3_maxiter": Param("c3_maxiter", int, 50, "L-BFGS-B iterations of each C3 training", low=1, high=100000,
                            quick=20),
        "c3_test_tuples": Param("c3_test_tuples", int, 4, "test tuples per test image for R_k,test", low=1,
                                high=256, quick=1),
        "k_min_factor": Param("k_min_factor", float, 16.0, "fit k >= k_min_factor * expansion scale", low=0.0),
    }

    def cells(self, cfg):
        out = []
        for name in cfg["settings"].split(","):
            enc, ker = name.split("-")
            out.append({"setting": name, "encoder": enc, "kernel": ker, "tau": float(cfg[f"tau_{enc}"]),
                        "dim": {"pixels": 64, "rff": RFF_FEATURES, "mlp": cfg["mlp_dim"]}[enc]})
        return out

    def block_dims(self, cfg):
        k = 2 ** np.arange(int(math.log2(cfg["k_max"])) + 1)
        dims = {n: ("k",) for n in ("gap", "gap_plain", "d", "d_plain", "no_match")}
        dims["ell_inf"] = ()
        for n in ("c3_risk_train", "c3_risk_test", "c3_ce_test", "c3_converged"):
            dims[n] = ("n_train", "k_train")
        return dims, {"k": k, "n_train": np.array(_grid(cfg, "c3_n")), "k_train": np.array(_grid(cfg, "c3_k"))}

    # -- prepare: the encoder and the exact constants -----------------------------------------------
    def prepare(self, cell, cfg, rng):
        split = load_split()
        test, tau = split["test"], cell["tau"]
        out = {}
        theta = None
        if cell["encoder"] == "mlp":
            sample = training_tuples(split, split["train"], cell["kernel"], cfg["fit_n"], cfg["fit_k"],
                                     cfg["aug_noise"], rng)
            init = TwoLayerEmbedding.random(64, cfg["mlp_dim"], cfg["mlp_hidden"], rng=rng)
            res = train(EmpiricalRisk(sample, tau), init, maxiter=cfg["fit_maxiter"])
            theta = np.asarray(res.embedding.params)
            out.update(theta=theta, fit_risk=np.array(res.report.value), fit_converged=np.array(float(res.converged)),
                       fit_iterations=np.array(float(res.report.iterations)))
        phi = make_encoder(cell["encoder"], cfg, theta)
        emb = phi(split["unit"][test])
        grid = 2 ** np.arange(int(math.log2(cfg["k_max"])) + 1)
        labels = split["labels"][test]
        views = None if cell["kernel"] == "label" else (
            lambda: augmented_views(phi, split["images"][test], cfg["n_views"], cfg["aug_noise"], rng=rng))
        out.update(diagnosed_constants(emb, labels, tau, grid, cfg["n_exact_anchors"], rng, views))
        # E_x[m1/Z] of the label kernel (d1 of C2) and the exact D_k, finite sums in log space
        s, log_z = scores_and_log_z(emb, tau)
        idx, mask = class_members(labels)
        m1_z, ratio2 = class_first_order(s, log_z, idx, mask)
        out["d1"] = np.array(np.mean(m1_z) if cell["kernel"] == "label" else np.nan)
        out["d_exact"] = out["d_exact_mcse"] = np.full(grid.size, np.nan)
        if cell["kernel"] == "label":
            out["d_exact"], out["d_exact_mcse"] = exact_d_two_phase(s, m1_z, idx, mask, grid, cfg["n_exact_d"], rng)
        out["ratio2"] = np.array(ratio2)
        return out

    # -- generate: one replicate block ----------------------------------------------------------------
    def generate(self, cell, cfg, prep, rng):
        split = load_split()
        test, tau, kernel = split["test"], cell["tau"], cell["kernel"]
        theta = prep.get("theta") if cell["encoder"] == "mlp" else None
        phi = make_encoder(cell["encoder"], cfg, theta)
        emb = phi(split["unit"][test])
        grid = 2 ** np.arange(int(math.log2(cfg["k_max"])) + 1)
        out = self._c1_c2_block(split, emb, phi, kernel, tau, grid, cfg["tuples_per_anchor"], cfg["aug_noise"], rng)
        shape = (len(_grid(cfg, "c3_n")), len(_grid(cfg, "c3_k")))
        for n in ("c3_risk_train", "c3_risk_test", "c3_ce_test", "c3_converged"):
            out[n] = np.full(shape, np.nan)
        if cell["encoder"] == "mlp":
            self._c3_block(split, cell, cfg, rng, out)
        return out

    @staticmethod
    def _c1_c2_block(split, emb, phi, kernel, tau, grid, r, noise, rng) -> dict:
        """One block: r tuples per test image (gap_k, C1) and, for the label kernel, D_k (C2)."""
        test = split["test"]
        labels = split["labels"][test]
        s, log_z = scores_and_log_z(emb, tau)
        idx, mask = class_members(labels)
        s_pos = positive_scores(s, emb, idx, mask, r, tau, rng, None if kernel == "label" else
                                (lambda m: augmented_views(phi, split["images"][test], m, noise, rng=rng)))
        neg = rng.integers(0, test.size, size=(test.size, r, int(grid[-1])))
        out = gap_block(s, log_z, s_pos, neg, grid)
        if kernel != "label":
            nan = np.full(grid.size, np.nan)
            return {**out, "d": nan, "d_plain": nan.copy(), "no_match": nan.copy()}
        return {**out, **class_d_block(s, log_z, labels, idx, mask, neg, grid)}

    @staticmethod
    def _c3_block(split, cell, cfg, rng, out) -> None:
        """C3: an MLP trained on n tuples with k negatives per grid cell; its train and test risks."""
        test, tau, kernel = split["test"], cell["tau"], cell["kernel"]
        idx, mask = class_members(split["labels"][test])
        r = cfg["c3_test_tuples"]
        for i, n in enumerate(_grid(cfg, "c3_n")):
            for j, k in enumerate(_grid(cfg, "c3_k")):
                sample = training_tuples(split, split["train"], kernel, n, k, cfg["aug_noise"], rng)
                init = TwoLayerEmbedding.random(64, cfg["mlp_dim"], cfg["mlp_hidden"], rng=rng)
                res = train(EmpiricalRisk(sample, tau), init, maxiter=cfg["c3_maxiter"])
                net = res.embedding
                views = None if kernel == "label" else (
                    lambda m: augmented_views(net, split["images"][test], m, cfg["aug_noise"], rng=rng))
                risk, ce = population_risk(net(split["unit"][test]), idx, mask, k, r, tau, rng, views)
                out["c3_risk_train"][i, j] = res.report.value
                out["c3_risk_test"][i, j] = risk
                out["c3_ce_test"][i, j] = ce
                out["c3_converged"][i, j] = float(res.converged)

    # -- summarise -----------------------------------------------------------------------------------
    def summarise(self, raw, cfg) -> dict:
        k = raw["k"].values
        n_set = raw.sizes["setting"]
        out = block_means(raw, {**{n: n for n in ("gap", "gap_plain", "d", "d_plain", "no_match")}, "ce_estimate": "ell_inf"})
        out.pop("no_match_mcse")
        out["k_gap"], out["k_gap_mcse"] = out["gap"] * k, out["gap_mcse"] * k
        prep = {n: raw[f"prep_{n}"].values for n in ("c1", "c1_mcse", "scale", "d1")}
        errors = [bool(str(e)) for e in raw["cell_error"].values]
        rows = [rate_verdict(k, raw["raw_gap"].values[i], float(prep["scale"][i]), cfg["k_min_factor"],
                             float(prep["c1"][i]), float(prep["c1_mcse"][i]), alpha=ALPHA, test_constant=True,
                             failed_blocks=errors[i]) for i in range(n_set)]
        out.update(rate_columns(rows, SCHEMA, names={**C1_NAMES, "fit_abs": "fit", "resid_const": "resid_c1",
                                                    "reason": "verdict_reason"}))
        label = [str(v) == "label" for v in raw["kernel"].values]
        nan_k = np.full(k.size, np.nan)
        na = {**{f: math.nan for f in RATE_FIELDS}, "fit_abs": nan_k, "resid_rate": nan_k, "resid_const": nan_k,
              "verdict": "n/a", "reason": ""}  # D_k has no density under the augmentation kernel
        d_rows = [rate_verdict(k, raw["raw_d"].values[i], float(prep["scale"][i]), cfg["k_min_factor"], float(prep["d1"][i]),
                               0.0, alpha=ALPHA, test_constant=False, failed_blocks=errors[i]) if label[i] else na
                  for i in range(n_set)]
        out.update(rate_columns(d_rows, SCHEMA, prefix="d_", names={
            "const_estimate": "d1_estimate", "const_estimate_mcse": "d1_estimate_mcse", "const_z": "d1_z",
            "reason": "d_verdict_reason", "fit_abs": "d_fit"}))
        out.update({n: raw[f"prep_{p}"].values for n, p in {
            "c1_exact": "c1", "c1_exact_mcse": "c1_mcse", "c2_exact": "c2", "c2_exact_mcse": "c2_mcse", "d1_exact": "d1",
            "expansion_scale": "scale", **{n: n for n in ("ce", "ce_mcse", "top1", "top1_mcse", "recall10", "recall10_mcse",
                                                          "gap_exact", "gap_exact_mcse", "d_exact", "d_exact_mcse")}}.items()})
        with np.errstate(invalid="ignore", divide="ignore"):
            out["gap_z"] = (out["gap"] - out["gap_exact"]) / np.hypot(out["gap_mcse"], out["gap_exact_mcse"])
            out["d_z"] = (out["d"] - out["d_exact"]) / np.hypot(out["d_mcse"], out["d_exact_mcse"])
        # C3
        tr, te, ce = (raw[f"raw_c3_{n}"].values for n in ("risk_train", "risk_test", "ce_test"))
        logk = np.log(raw["k_train"].values.astype(float))[None, None, None, :]
        gap_blocks = te - tr
        for name, blocks in (("c3_gap", gap_blocks), ("c3_ce_gap", ce - (tr - logk)), ("c3_risk_train", tr),
                             ("c3_risk_test", te)):
            out[name], out[f"{name}_mcse"] = mean_mcse(blocks, axis=1)
        out["c3_converged"], _ = mean_mcse(raw["raw_c3_converged"].values, axis=1)
        out["c3_slope_n"], out["c3_slope_n_se"] = size_slopes(raw["n_train"].values, np.moveaxis(gap_blocks, 3, 1))
        return out

    def attrs(self, cfg):
        split = load_split()
        return {"alpha": ALPHA, "split_seed": SPLIT_SEED, "rff_seed": RFF_SEED, "rff_features": RFF_FEATURES,
                "rff_bandwidth": RFF_BANDWIDTH, "test_fraction": TEST_FRACTION, "n_train_images": int(split["train"].size),
                "n_test_images": int(split["test"].size), "test_index_sha256": split["sha256"],
                "pi": "uniform over the test images (normalised pixels on S^63)"}


STUDY = Digits()
