"""Claims C3, C5 (gap side) and C6: the generalisation gap of a trained embedding, over n, k, tau and d.

ADEMP (Morris, White & Crowther 2019)
-------------------------------------
Aim        C3 (THEORY.md section 3, Theorem 1): for an ERM embedding phi_hat the gap
           G = R_k(phi_hat) - R_hat_{n,k}(phi_hat) is O(n^{-1/2}) and does not grow with k (the
           complexity term stabilises). C5 (gap side): G grows as tau -> 0. C6: G carries no explicit
           dependence on the embedding dimension d.
Data       pi uniform on S^2, positives x+ ~ vMF(x, kappa_M = 10), k i.i.d. negatives per tuple, base
           temperature tau = 1/kappa_M (then phi = identity has Q = M and CE = -I exactly). Four
           sweeps, each with replicate training sets (blocks): n (k = k_n, linear family d = 3), k
           (n = n_k, linear d = 3), tau (n = n_tau, k = k_tau, linear d = 3) and d (n = n_d,
           k = k_d, the random-Fourier lift of simkit.lifted: 9 trainable parameters and the
           Lipschitz constant 1/sqrt(3) in them for every d = 6 ... 256, while the score kernel
           changes with d). Within a sweep and block the levels share random numbers: the n
           sweep uses the first n tuples of one sample, the k sweep the first k negatives of each
           tuple, the tau and d sweeps the same sample, and all levels the same initialisation and
           evaluation seeds (seed split: sample / init / restarts / evaluation, from
           SeedSequence(seed, spawn_key=(*cell_key({"sweep": s}), 1, block))).
Estimand   E[G] and E[E] (E = CE(phi_hat) - (R_hat - log k)) at every level; the slope of log E[G]
           on log n; the slope of E[G] in log2 k for k >= k_trend_min; the slope of log E[G] on
           log tau; the slope of E[G] in log2 d.
Methods    phi_hat by L-BFGS-B (simkit.training.train, `restarts` starts, best kept). R_k(phi_hat) on
           fresh tuples paired with phi = identity: R_k(phi_hat) = R_k(id) + mean(l(phi_hat) - l(id)),
           R_k(id) = log k + CE(id) + gap_k(id) exact (simkit.exact). Control variate with exactly zero
           mean: G_cv = G + R_hat(id) - R_k(id) (same for E), which removes the O(n^{-1/2}) sampling
           noise of the loss level and keeps the estimator exactly unbiased for E[G]. CE(phi_hat) by
           simkit.population.generalisation (quadrature, identity control variate; linear family
           only: simkit.population estimates R_k with the jitted routines, which do not cover the
           Fourier family, and its quadrature at d = 256 would take minutes per training set; E is not
           computed in the d sweep).
           MCSE: sd over blocks / sqrt(blocks). Slopes: WLS of log means with delete-one-block
           jackknife SE (simkit.analysis.fit_rate) for n and tau; per-block OLS slopes (mean, sd /
           sqrt(blocks)) for k and d. One-sided or two-sided t tests at ALPHA with the effect each
           detects with probability POWER.
Performance  Per level: E[G], E[E] with MCSE, plain and control-variate versions, sd of G (sample
           variability), convergence; for the d sweep the effective dimension of phi_hat(x) and the
           change of the scores against the largest d at the same parameters. Checks:
           C3 n-slope <= -1/2 (one-sided); C3 no growth in k at large k (one-sided, with power);
           C5 slope in log tau < 0 (one-sided, false-failure rate by plug-in); C6 slope in log2 d = 0
           (two-sided, with power); supplementary: equivalence of the d-trend to within
           +-EQUIV_MARGIN of E[G] per doubling (two one-sided tests).

Run it: ``simkit run generalisation`` or ``python studies/generalisation.py`` (same options).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np
import xarray as xr
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from simkit import Uniform, VMFKernel, exact
from simkit.analysis import fit_rate, jackknife, mean_mcse
from simkit.embedding import LinearEmbedding
from simkit.engine import Param, Study, task_seed
from simkit.lifted import LIFT_SEED, FourierEmbedding, LiftedRisk
from simkit.population import generalisation
from simkit.training import EmpiricalRisk, TrainingSample, train

__all__ = ["STUDY", "ALPHA", "POWER", "EQUIV_MARGIN", "SWEEPS", "TrendTest", "trend_test", "one_sided_rate", "level_grid"]

#: level of every check (one-sided tests at ALPHA; the two-sided C6 test at ALPHA in total)
ALPHA = 0.01
#: detection probability at which each check's power is stated
POWER = 0.9
#: equivalence margin of the supplementary C6 check: |trend of E[G]| per doubling of d, relative to E[G].
#: Bounds with an explicit sqrt(d) grow by 41% per doubling, log d by 1/log2(d) (14-50% here).
EQUIV_MARGIN = 0.10
SWEEPS = ("n", "k", "tau", "d")
P_DIM = 3  # data on S^2: quadrature gives Z to ~1e-9 (simkit.quadrature)
#: caps on embedded points (and on points x d values, Fourier family) per evaluation chunk: bounds memory
_CHUNK_POINTS = 1 << 18
_CHUNK_VALUES = 1 << 22
#: points x ~ pi (and as many y) for the effective-dimension and score-change diagnostics of the Fourier family
_DIAG_POINTS = 1024


# ----------------------------------------------------------------------------------------------
# analysis helpers

@dataclass(frozen=True)
class TrendTest:
    """A t test on the mean over blocks of per-block OLS slopes of y on x (see :func:`trend_test`)."""

    slope: float
    se: float
    t: float
    df: int
    p: float
    critical: float
    reject: bool
    detect: float  # |slope| detected with probability POWER
    alternative: str
    n_blocks: int
    slopes: NDArray[np.float64]


def trend_test(x: ArrayLike, blocks: ArrayLike, *, alternative: str, alpha: float = ALPHA,
               power: float = POWER) -> TrendTest:
    """Test the slope of y on x from independent blocks (common random numbers across x within a block).

    Parameters
    ----------
    x : array_like, shape (J,)
        Levels (e.g. log2 k), at least two distinct.
    blocks : array_like, shape (n_blocks, J)
        Per-block estimates at each level; blocks with a NaN are dropped.
    alternative : {"greater", "less", "two-sided"}
        H1. "greater": H0 slope <= 0 is rejected when t > t_{1-alpha}.
    alpha, power : float
        Level, and the detection probability of the stated detectable slope ``detect``.

    Returns
    -------
    TrendTest
        ``slope`` = mean of the per-block OLS slopes (equal to the OLS slope of the mean curve),
        ``se`` = their sd / sqrt(n_blocks), t with n_blocks - 1 df, its p-value, and
        ``detect = (t_{1-alpha(/2)} + t_{power}) se``: a true slope of that size (in the direction
        of H1) is detected with probability about ``power``.
    """
    if alternative not in ("greater", "less", "two-sided"):
        raise ValueError(f"'alternative' must be 'greater', 'less' or 'two-sided', got {alternative!r}")
    x = np.asarray(x, dtype=float)
    b = np.asarray(blocks, dtype=float)
    if b.ndim != 2 or b.shape[1] != x.size:
        raise ValueError(f"'blocks' must have shape (n_blocks, {x.size}), got {b.shape}")
    if np.unique(x).size < 2:
        raise ValueError("'x' must hold at least two distinct levels")
    b = b[np.all(np.isfinite(b), axis=1)]
    n = b.shape[0]
    nan = float("nan")
    if n < 3:
        return TrendTest(nan, nan, nan, max(n - 1, 0), nan, nan, False, nan, alternative, n, np.full(n, nan))
    xc = x - x.mean()
    slopes = (b - b.mean(axis=1, keepdims=True)) @ xc / np.dot(xc, xc)
    slope = float(slopes.mean())
    se = float(slopes.std(ddof=1) / np.sqrt(n))
    df = n - 1
    t = slope / se if se > 0 else (math.copysign(math.inf, slope) if slope else 0.0)
    if alternative == "two-sided":
        crit = float(stats.t.isf(alpha / 2, df))
        p, reject = float(2 * stats.t.sf(abs(t), df)), bool(abs(t) > crit)
    elif alternative == "greater":
        crit = float(stats.t.isf(alpha, df))
        p, reject = float(stats.t.sf(t, df)), bool(t > crit)
    else:
        crit = float(stats.t.isf(alpha, df))
        p, reject = float(stats.t.cdf(t, df)), bool(t < -crit)
    detect = (crit + float(stats.t.ppf(power, df))) * se
    return TrendTest(slope, se, float(t), df, p, crit, reject, float(detect), alternative, n, slopes)


@dataclass(frozen=True)
class RateCheck:
    """Log-log slope of a positive mean curve with a one-sided test against a bound (see :func:`one_sided_rate`)."""

    slope: float
    se: float
    intercept: float
    df: int
    bound: float
    t: float
    p: float
    critical: float
    reject: bool
    detect: float
    fitted: NDArray[np.float64]


def one_sided_rate(x: ArrayLike, blocks: ArrayLike, *, bound: float, alternative: str, alpha: float = ALPHA,
                   power: float = POWER) -> RateCheck:
    """WLS slope of log(mean over blocks) on log x, jackknife SE (:func:`simkit.analysis.fit_rate`), and a
    one-sided t test of H0 ``slope <= bound`` (``alternative="greater"``) or ``slope >= bound`` ("less").

    ``detect`` is the distance from ``bound`` (towards H1) detected with probability ``power``.
    A mean that is not positive at some level gives an all-NaN result (no log fit is possible).
    """
    x = np.asarray(x, dtype=float)
    fit = fit_rate(x, blocks, float(np.min(x)), with_inverse=False)
    nan = float("nan")
    if not np.isfinite(fit.slope):
        return RateCheck(nan, nan, nan, fit.df, bound, nan, nan, nan, False, nan, np.full(x.size, nan))
    t = (fit.slope - bound) / fit.slope_se
    crit = float(stats.t.isf(alpha, fit.df))
    if alternative == "greater":
        p, reject = float(stats.t.sf(t, fit.df)), bool(t > crit)
    elif alternative == "less":
        p, reject = float(stats.t.cdf(t, fit.df)), bool(t < -crit)
    else:
        raise ValueError(f"'alternative' must be 'greater' or 'less', got {alternative!r}")
    detect = (crit + float(stats.t.ppf(power, fit.df))) * fit.slope_se
    return RateCheck(fit.slope, fit.slope_se, fit.intercept, fit.df, bound, float(t), p, crit, reject, float(detect),
                     np.exp(fit.fitted))


def level_grid(low: int, high: int, step: int) -> list[int]:
    """``low, low*step, low*step^2, ...`` up to ``high`` (inclusive)."""
    out, v = [], int(low)
    while v <= high:
        out.append(v)
        v *= int(step)
    return out


def sweep_seeds(seed: int, sweep: str, block: int) -> list[np.random.SeedSequence]:
    """Seeds of replicate ``block`` of ``sweep``, shared by all its levels: sample, init, restarts, evaluation.

    ``SeedSequence(seed, spawn_key=(*cell_key({"sweep": sweep}), 1, block)).spawn(4)`` (simkit.engine.task_seed
    with the sweep alone as the cell).
    """
    return task_seed(seed, {"sweep": sweep}, 1, block).spawn(4)


def _block_of(rng: np.random.Generator) -> int:
    """The block index of an engine task's generator (its seed's spawn key ends with (stage, block))."""
    seq = getattr(rng.bit_generator, "seed_seq", None)
    key = getattr(seq, "spawn_key", ())
    if len(key) < 2 or key[-2] != 1:
        raise ValueError("'rng' must be the generator the engine passes to generate() (SeedSequence with spawn key "
                         "(*cell_key, 1, block)); call generate through simkit.engine.run_study")
    return int(key[-1])


def _floats(text: str, name: str) -> list[float]:
    try:
        vals = [float(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"'{name}' must be comma-separated numbers, got {text!r}") from None
    if len(vals) < 2 or len(set(vals)) != len(vals) or not all(math.isfinite(v) and v > 0 for v in vals):
        raise ValueError(f"'{name}' must list at least two distinct positive numbers, got {text!r}")
    return sorted(vals, reverse=True)


def _dims(text: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"'ds' must be comma-separated integers, got {text!r}") from None
    if len(vals) < 3 or len(set(vals)) != len(vals) or any(v < 6 or v % 2 for v in vals):
        raise ValueError(f"'ds' must list at least three distinct even dimensions >= 6 (d = 2m, m >= 3 frequencies), "
                         f"got {text!r}")
    return sorted(vals)


def _attrs(long_name: str, units: str, description: str) -> dict:
    return {"long_name": long_name, "units": units, "description": description}


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
                   "control variate R_hat(id) - R_k(id); CE by quadrature (simkit.population); WLS log-log fits with "
                   "jackknife SE; per-block OLS trend slopes; t tests at level ALPHA with stated power",
        "performance": "E[G], E[E] with MCSE per level; n-slope <= -1/2 (one-sided); k-trend <= 0 at large k "
                       "(one-sided, power); tau-slope < 0 (one-sided); d-trend = 0 (two-sided, power); runtimes",
    }
    params = {
        "sweeps": Param("sweeps", str, "n,k,tau,d", "comma-separated sweeps to run", choices=SWEEPS, multi=True),
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
        "taus": Param("taus", str, "1,0.5,0.2,0.1,0.05,0.02", "temperatures of the tau sweep (comma-separated)",
                      quick="0.5,0.1,0.03"),
        "n_tau": Param("n_tau", int, 256, "training tuples in the tau sweep", low=8, high=1 << 16, quick=128),
        "k_tau": Param("k_tau", int, 32, "negatives per tuple in the tau sweep", low=1, high=4096, quick=16),
        "ds": Param("ds", str, "6,8,16,32,64,128,256", "embedding dimensions of the d sweep (even, >= 6)",
                    quick="6,16,64"),
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
        _floats(cfg["taus"], "taus")
        _dims(cfg["ds"])
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
        if sweep == "n":
            return level_grid(cfg["n_min"], cfg["n_max"], cfg["n_step"])
        if sweep == "k":
            return level_grid(1, cfg["k_max"], cfg["k_step"])
        if sweep == "tau":
            return _floats(cfg["taus"], "taus")
        return _dims(cfg["ds"])

    def cells(self, cfg):
        out = []
        for s in cfg["sweeps"].split(","):
            for v in self.levels(cfg, s):
                n = {"n": v, "k": cfg["n_k"], "tau": cfg["n_tau"], "d": cfg["n_d"]}[s]
                k = {"n": cfg["k_n"], "k": v, "tau": cfg["k_tau"], "d": cfg["k_d"]}[s]
                out.append({
                    "point": f"{s}={v:g}", "sweep": s, "family": "fourier" if s == "d" else "linear",
                    "n": int(n), "k": int(k), "tau": float(v if s == "tau" else cfg["tau"]),
                    "d": int(v if s == "d" else P_DIM), "kappa_m": float(cfg["kappa_m"]),
                })
        return out

    def block_dims(self, cfg):
        return {name: () for name in BLOCK_VARS}, {}

    def prepare(self, cell, cfg, rng):
        kernel, tau, k = VMFKernel(cell["kappa_m"]), cell["tau"], cell["k"]
        ce_id = float(exact.cross_entropy(Uniform(P_DIM), kernel, tau))
        gap_id = float(exact.gap_exact(kernel, P_DIM, tau, [k])[0])
        return {"ce_id": np.array(ce_id), "gap_id": np.array(gap_id), "risk_id": np.array(math.log(k) + ce_id + gap_id),
                "entropy": np.array(-exact.mutual_information(kernel, P_DIM))}

    def _sample(self, cell, cfg, rng) -> TrainingSample:
        pi, kernel = Uniform(P_DIM), VMFKernel(cell["kappa_m"])
        s = cell["sweep"]
        if s == "n":  # first n tuples of one sample of n_max
            full = TrainingSample.draw(pi, kernel, cfg["n_max"], cell["k"], rng=rng)
            n = cell["n"]
            return TrainingSample(full.x[:n], full.x_pos[:n], full.negatives[:n])
        if s == "k":  # first k negatives of each tuple of one sample with k_max
            full = TrainingSample.draw(pi, kernel, cell["n"], cfg["k_max"], rng=rng)
            return TrainingSample(full.x, full.x_pos, full.negatives[:, :cell["k"]])
        return TrainingSample.draw(pi, kernel, cell["n"], cell["k"], rng=rng)

    def generate(self, cell, cfg, prep, rng):
        """One training set of the cell's sweep and block (the engine's ``rng`` is not used: the seeds are
        shared by the levels of a sweep, see the module notes)."""
        s_sample, s_init, s_restart, s_eval = sweep_seeds(cfg["seed"], cell["sweep"], _block_of(rng))
        s_pair, s_ce, s_diag = s_eval.spawn(3)
        pi, kernel, tau, k = Uniform(P_DIM), VMFKernel(cell["kappa_m"]), cell["tau"], cell["k"]
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
        ident = LinearEmbedding.identity(P_DIM)
        train_risk = risk.value(phi)
        train_risk_id = EmpiricalRisk(sample, tau).value(ident)

        # R_k(phi_hat) - R_k(id) on fresh tuples, paired
        n_eval = int(np.clip(cfg["eval_points"] // (k + 2), cfg["eval_min"], cfg["eval_max"]))
        cap = _CHUNK_POINTS if not lifted else min(_CHUNK_POINTS, _CHUNK_VALUES // cell["d"])
        chunk = max(1, cap // (k + 2))
        ev_rng = np.random.default_rng(s_pair)
        diffs = []
        for lo in range(0, n_eval, chunk):
            ev = TrainingSample.draw(pi, kernel, min(chunk, n_eval - lo), k, rng=ev_rng)
            er = LiftedRisk(ev, tau) if lifted else EmpiricalRisk(ev, tau)
            diffs.append(er.losses(phi) - EmpiricalRisk(ev, tau).losses(ident))
        diff = np.concatenate(diffs)
        risk_diff, risk_diff_mcse = float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(diff.size))
        risk_id = float(prep["risk_id"])
        gap = risk_id + risk_diff - train_risk
        control = train_risk_id - risk_id  # exactly zero mean over training samples

        out = {name: np.nan for name in BLOCK_VARS}
        out.update(gap=gap, gap_cv=gap + control, gap_eval_mcse=risk_diff_mcse, risk_excess=risk_diff,
                   train_risk=train_risk, train_risk_id=train_risk_id, n_eval=n_eval)
        if not lifted and cfg["ce_anchors"] > 0:
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
            ref = FourierEmbedding.frame(P_DIM, max(_dims(cfg["ds"])), W=phi.W, seed=LIFT_SEED)
            change = np.abs(np.sum(f * phi(yd), axis=1) - np.sum(ref(xd) * ref(yd), axis=1)) / tau
            out.update(eff_dim=float(ev.sum() ** 2 / np.sum(ev ** 2)), score_change=float(np.mean(change)),
                       lipschitz=phi.param_lipschitz())
        else:
            sv = np.linalg.svd(phi.W, compute_uv=False)
            out.update(isometry=float(sv[-1] / sv[0]))
        return {name: np.asarray(v, dtype=float) for name, v in out.items()}

    # ------------------------------------------------------------------------------------------
    def summarise(self, raw: xr.Dataset, cfg) -> xr.Dataset:
        ds = raw.copy()
        P = ("point",)
        a = _attrs
        new = {}
        for name, (ln, units, desc) in SUMMARY_VARS.items():
            m, se = mean_mcse(raw[f"raw_{name}"].values, axis=1)
            new[name] = (P, m, a(ln, units, desc))
            new[f"{name}_mcse"] = (P, se, a(f"MCSE of {name}", units, "sd over blocks / sqrt(blocks)"))
        g = raw["raw_gap"].values
        _, sd = mean_mcse(g, axis=1)
        sd = sd * np.sqrt(np.sum(np.isfinite(g), axis=1))
        new["gap_sd"] = (P, sd, a("sd of G over training sets", "nat",
                                  "replicate-to-replicate sd of G (sampling variability of R_hat and phi_hat, plus "
                                  "the small evaluation noise gap_eval_mcse)"))
        new["n_finished"] = (P, np.sum(np.isfinite(g), axis=1).astype(float),
                             a("finished blocks", "1", "blocks whose task did not raise"))
        new["risk_id"] = (P, raw["prep_risk_id"].values, a("R_k(identity)", "nat", "log k + CE(id) + gap_k(id), exact"))
        new["ce_id"] = (P, raw["prep_ce_id"].values, a("CE(identity)", "nat", "simkit.exact.cross_entropy"))
        new["gap_id"] = (P, raw["prep_gap_id"].values, a("gap_k(identity)", "nat",
                                                        "R_k - log k - CE for phi = identity (simkit.exact.gap_exact)"))
        new["entropy"] = (P, raw["prep_entropy"].values, a("H = -I(x; x+)", "nat", "minimum of CE over all Q"))
        for name, (dims, values, at) in new.items():
            ds[name] = (dims, values)
            ds[name].attrs = at
        sweeps = [str(s) for s in ds["sweep"].values]
        errors = [str(e) for e in ds["cell_error"].values]
        checks = {}
        for s in SWEEPS:
            idx = [i for i, v in enumerate(sweeps) if v == s]
            if not idx:
                continue
            err = "; ".join(f"{ds['point'].values[i]}: {errors[i]}" for i in idx if errors[i])
            checks[s] = self._check(s, ds, idx, cfg, err)
        for s, fields in checks.items():
            for key, (value, at) in fields.items():
                ds[f"{s}_{key}"] = ((), value) if not isinstance(value, np.ndarray) else (("point",), value)
                ds[f"{s}_{key}"].attrs = at
        self._coord_attrs(ds)
        for v in [n for n in ds.data_vars if n.startswith("raw_")]:
            name = v[4:]
            ln, units, desc = RAW_DESCR.get(name, (name, "1", ""))
            ds[v].attrs = a(f"per-block {ln}", units, desc)
        for v in [n for n in ds.data_vars if n.startswith("prep_")]:
            ds[v].attrs = a(f"per-point constant {v[5:]}", "nat", "exact value from the prepare stage (simkit.exact)")
        ds.attrs.update({"alpha": ALPHA, "power": POWER, "lift_seed": LIFT_SEED,
                         "seed_split": "per (sweep, block): SeedSequence(seed, spawn_key=(*cell_key({'sweep': s}), 1, "
                                       "block)).spawn(4) -> sample, init, restarts, evaluation (evaluation.spawn(3) -> "
                                       "paired R_k, CE, diagnostics); shared by the levels of the sweep"})
        return ds

    @staticmethod
    def _coord_attrs(ds):
        a = _attrs
        ds["point"].attrs = a("design point", "1", "sweep=level")
        ds["sweep"].attrs = a("sweep", "1", "n, k, tau or d: the factor varied at this point")
        ds["family"].attrs = a("embedding family", "1", "linear (phi = Wx/|Wx|, d = 3) or fourier (simkit.lifted."
                                                        "FourierEmbedding, 9 parameters)")
        ds["n"].attrs = a("training tuples n", "1", "size of the training sample")
        ds["k"].attrs = a("negatives per tuple k", "1", "InfoNCE negatives")
        ds["tau"].attrs = a("temperature tau", "1", "score phi(x).phi(y)/tau")
        ds["d"].attrs = a("embedding dimension d", "1", "phi maps S^2 into S^(d-1)")
        ds["kappa_m"].attrs = a("kernel concentration kappa_M", "1", "M(x, .) = vMF(x, kappa_M)")

    def _check(self, s, ds, idx, cfg, err) -> dict:
        """Fit and verdict of one sweep: {name: (value, attrs)} stored as ``<sweep>_<name>``."""
        a = _attrs
        blocks = ds["raw_gap_cv"].values[idx].T  # (blocks, levels)
        lv = np.array([float(ds[{"n": "n", "k": "k", "tau": "tau", "d": "d"}[s]].values[i]) for i in idx])
        out = {}
        reason = []
        verdict = "fail"
        if s in ("n", "tau"):
            bound = -0.5 if s == "n" else 0.0
            alt = "greater" if s == "n" else "less"
            rc = one_sided_rate(lv, blocks, bound=bound, alternative=alt)
            what = "log E[G] on log n" if s == "n" else "log E[G] on log tau"
            fitted = np.full(ds.sizes["point"], np.nan)
            fitted[idx] = rc.fitted
            out.update({
                "slope": (rc.slope, a(f"slope of {what}", "1", "WLS on the block means, all levels")),
                "slope_se": (rc.se, a("SE of slope", "1", "delete-one-block jackknife")),
                "slope_t": (rc.t, a(f"t statistic against {bound:g}", "1", "(slope - bound) / SE")),
                "slope_p": (rc.p, a("one-sided p-value", "1",
                                    "H0: slope <= -1/2" if s == "n" else "H0: slope >= 0 (G does not grow as tau falls)")),
                "slope_detect": (rc.detect, a(f"slope change detected with probability {POWER:g}", "1",
                                              "(t_(1-alpha) + t_power) SE, from the bound towards H1")),
                "fit": (fitted, a("fitted E[G]", "nat", "exp of the log-log WLS fit")),
            })
            if not np.isfinite(rc.slope):
                reason.append("mean G not positive at every level: no log-log fit")
            elif s == "n":
                if rc.reject:
                    reason.append(f"slope {rc.slope:.3f} ± {rc.se:.3f} is above -1/2 (t = {rc.t:.2f} > {rc.critical:.2f})")
                else:
                    verdict = "pass"
                # the n^{-1/2} sample variability: sd of G from (mean of G, mean of G^2) over blocks
                g = ds["raw_gap"].values[idx].T
                g = g[np.all(np.isfinite(g), axis=1)]
                if g.shape[0] >= 3:
                    logn = np.log(lv)
                    xc = logn - logn.mean()

                    def sd_slope(curve):
                        m1, m2 = curve[:lv.size], curve[lv.size:]
                        return np.array([np.dot(xc, 0.5 * np.log(np.maximum(m2 - m1**2, 1e-300))) / np.dot(xc, xc)])

                    est, se, _ = jackknife(sd_slope, np.concatenate([g, g**2], axis=1))
                    out["sd_slope"] = (float(est[0]), a("slope of log sd(G) on log n", "1",
                                                        "OLS on the block-level sd; sampling variability is O(n^-1/2)"))
                    out["sd_slope_se"] = (float(se[0]), a("SE of sd_slope", "1", "delete-one-block jackknife"))
            else:
                ff = float(stats.t.sf(-rc.critical - rc.slope / rc.se, rc.df)) if np.isfinite(rc.slope) else np.nan
                out["false_fail"] = (ff, a("plug-in false-failure rate", "1",
                                           "P(the test fails to reject) if the true slope equals the estimate"))
                if rc.reject:
                    verdict = "pass"
                else:
                    reason.append(f"slope {rc.slope:.3f} ± {rc.se:.3f}: growth of G as tau falls not shown "
                                  f"(t = {rc.t:.2f}, needs < {-rc.critical:.2f})")
        else:
            x = np.log2(lv)
            sel = lv >= cfg["k_trend_min"] if s == "k" else np.ones(lv.size, bool)
            tt = trend_test(x[sel], blocks[:, sel], alternative="greater" if s == "k" else "two-sided")
            grow = trend_test(x[sel], blocks[:, sel], alternative="greater")
            mean_level = float(np.mean(mean_mcse(blocks[:, sel], axis=0)[0]))
            out.update({
                "trend": (tt.slope, a(f"slope of E[G] in log2 {s}", "nat",
                                      "per doubling; mean of per-block OLS slopes" + (
                                          f" over k >= {cfg['k_trend_min']}" if s == "k" else ""))),
                "trend_se": (tt.se, a("SE of trend", "nat", "sd of the per-block slopes / sqrt(blocks)")),
                "trend_t": (tt.t, a("t statistic", "1", "trend / SE")),
                "trend_p": (tt.p, a("p-value", "1", "one-sided (H0: trend <= 0)" if s == "k" else "two-sided (H0: trend = 0)")),
                "trend_detect": (tt.detect, a(f"trend detected with probability {POWER:g}", "nat",
                                              "(t_(1-alpha) + t_power) SE" if s == "k" else "(t_(1-alpha/2) + t_power) SE")),
                "trend_level": (mean_level, a("mean E[G] over the trend levels", "nat", "for relative statements")),
                "growth_p": (grow.p, a("one-sided p-value of growth", "1", "H0: trend <= 0")),
                "rel_trend": (tt.slope / mean_level, a("trend relative to E[G]", "1",
                                                       "trend / trend_level: fraction of E[G] per doubling")),
                "rel_trend_se": (tt.se / mean_level, a("SE of rel_trend", "1",
                                                       "trend_se / trend_level (the level's own MCSE is ignored)")),
            })
            if s == "d" and np.isfinite(tt.slope):
                # equivalence (two one-sided tests): |trend| < EQUIV_MARGIN * E[G] per doubling
                margin = EQUIV_MARGIN * mean_level
                t_lo, t_hi = (tt.slope + margin) / tt.se, (margin - tt.slope) / tt.se
                crit = float(stats.t.isf(ALPHA, tt.df))
                eq_pass = bool(min(t_lo, t_hi) > crit)
                p_eq = float(max(stats.t.sf(t_lo, tt.df), stats.t.sf(t_hi, tt.df)))
                # probability of passing if the trend were exactly 0 (t approximation, SE as estimated)
                pw0 = float(max(0.0, 1.0 - 2.0 * stats.t.sf(margin / tt.se - crit, tt.df)))
                out.update({
                    "equiv_margin": (margin, a("equivalence margin", "nat",
                                               f"{EQUIV_MARGIN:g} x E[G] per doubling of d")),
                    "equiv_p": (p_eq, a("p-value of the equivalence test", "1",
                                        "max of the two one-sided p-values (TOST); H0: |trend| >= margin")),
                    "equiv_verdict": ("pass" if eq_pass else "fail", a("equivalence verdict", "1",
                                      f"pass when both one-sided tests reject at {ALPHA:g}")),
                    "equiv_power0": (pw0, a("probability of passing the equivalence test at trend 0", "1",
                                            "t approximation with the estimated SE")),
                })
            if not np.isfinite(tt.slope):
                reason.append("fewer than 3 finished blocks")
            elif tt.reject:
                reason.append(f"trend {tt.slope:+.4f} ± {tt.se:.4f} nat per doubling of {s} (t = {tt.t:.2f}, "
                              f"critical {tt.critical:.2f})")
            else:
                verdict = "pass"
        if err:
            verdict = "error"
            reason.insert(0, f"task errors: {err}")
        out["verdict"] = (verdict, a(f"verdict of the {s}-sweep check", "1", "pass, fail or error (a task failed)"))
        out["verdict_reason"] = ("; ".join(reason), a("why the check did not pass", "1", "empty when it passed"))
        return out

    # ------------------------------------------------------------------------------------------
    def report(self, ds, path):
        from simkit.report_generalisation import generalisation_report
        generalisation_report(ds, path)

    def report_sections(self, doc, ds):
        from simkit.report_generalisation import generalisation_sections
        generalisation_sections(doc, ds)

    def claim_rows(self, ds) -> list[dict]:
        """One check per sweep present: C3 (n-slope, k-growth), C5 (tau-slope), C6 (d-trend)."""
        rows = []
        v = lambda name: ds[name].values.item() if name in ds.variables else np.nan  # noqa: E731
        if "n_verdict" in ds:
            rows.append({
                "claim": "C3",
                "statistic": f"slope of log E[G] on log n (k = {int(ds['k'].values[list(ds['sweep'].values).index('n')])}"
                             f", linear d = 3), one-sided t test of H0 slope <= -1/2 at {ALPHA:g} (jackknife SE)",
                "estimate": float(v("n_slope")), "estimate_mcse": float(v("n_slope_se")),
                "false_fail_rate": ALPHA, "verdict": str(v("n_verdict")),
                "detail": f"n-slope {v('n_slope'):.3f} ± {v('n_slope_se'):.3f} (p of H0 <= -1/2: {v('n_slope_p'):.2g}; "
                          f"a slope {v('n_slope_detect'):.3f} above -1/2 is detected with probability {POWER:g}); "
                          f"sd(G) slope {v('n_sd_slope'):.3f} ± {v('n_sd_slope_se'):.3f}"
                          + (f" -> {v('n_verdict')} ({v('n_verdict_reason')})" if v("n_verdict_reason") else ""),
            })
        if "k_verdict" in ds:
            rows.append({
                "claim": "C3",
                "statistic": f"slope of E[G] per doubling of k over k >= {int(self._cfg(ds).get('k_trend_min', 0))}, "
                             f"one-sided t test of H0 slope <= 0 at {ALPHA:g}",
                "estimate": float(v("k_trend")), "estimate_mcse": float(v("k_trend_se")),
                "false_fail_rate": ALPHA, "verdict": str(v("k_verdict")),
                "detail": f"k-trend {v('k_trend'):+.4f} ± {v('k_trend_se'):.4f} nat per doubling (p {v('k_trend_p'):.2g}); "
                          f"growth of {v('k_trend_detect'):.4f} nat per doubling ({100 * v('k_trend_detect') / v('k_trend_level'):.0f}% "
                          f"of E[G] = {v('k_trend_level'):.4f}) is detected with probability {POWER:g}"
                          + (f" -> {v('k_verdict')} ({v('k_verdict_reason')})" if v("k_verdict_reason") else ""),
            })
        if "tau_verdict" in ds:
            rows.append({
                "claim": "C5",
                "statistic": f"slope of log E[G] on log tau (linear d = 3), one-sided t test of H0 slope >= 0 at "
                             f"{ALPHA:g}: pass = G shown to grow as tau falls",
                "estimate": float(v("tau_slope")), "estimate_mcse": float(v("tau_slope_se")),
                "false_fail_rate": float(v("tau_false_fail")), "verdict": str(v("tau_verdict")),
                "detail": f"tau-slope {v('tau_slope'):.3f} ± {v('tau_slope_se'):.3f} (p {v('tau_slope_p'):.2g}); "
                          f"false-failure rate is the plug-in P(no rejection) at the estimated slope"
                          + (f" -> {v('tau_verdict')} ({v('tau_verdict_reason')})" if v("tau_verdict_reason") else ""),
            })
        if "d_verdict" in ds:
            rows.append({
                "claim": "C6",
                "statistic": f"slope of E[G] per doubling of d (Fourier lift, 9 parameters, Lipschitz 1/sqrt(3), d = "
                             f"{int(np.min(self._levels(ds, 'd')))}..{int(np.max(self._levels(ds, 'd')))}), two-sided t test "
                             f"of H0 slope = 0 at {ALPHA:g}",
                "estimate": float(v("d_trend")), "estimate_mcse": float(v("d_trend_se")),
                "false_fail_rate": ALPHA, "verdict": str(v("d_verdict")),
                "detail": f"d-trend {v('d_trend'):+.4f} ± {v('d_trend_se'):.4f} nat per doubling (p {v('d_trend_p'):.2g}; "
                          f"one-sided p of growth {v('d_growth_p'):.2g}); a trend of ±{v('d_trend_detect'):.4f} nat "
                          f"({100 * v('d_trend_detect') / v('d_trend_level'):.0f}% of E[G] = {v('d_trend_level'):.4f}) per "
                          f"doubling is detected with probability {POWER:g}; relative trend {100 * v('d_rel_trend'):+.1f}% "
                          f"± {100 * v('d_rel_trend_se'):.1f}% per doubling, equivalence within ±{100 * EQUIV_MARGIN:g}% "
                          f"(TOST, supplementary): {v('d_equiv_verdict')} (p {v('d_equiv_p'):.2g})"
                          + (f" -> {v('d_verdict')} ({v('d_verdict_reason')})" if v("d_verdict_reason") else ""),
            })
        return rows

    @staticmethod
    def _cfg(ds) -> dict:
        import json
        try:
            cfg = json.loads(ds.attrs.get("config", "{}"))
        except (TypeError, ValueError):
            return {}
        return cfg if isinstance(cfg, dict) else {}

    @staticmethod
    def _levels(ds, s):
        sel = ds["sweep"].values == s
        return ds[{"n": "n", "k": "k", "tau": "tau", "d": "d"}[s]].values[sel]

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


#: per-block scalars returned by generate (NaN where not applicable)
BLOCK_VARS = ("gap", "gap_cv", "gap_eval_mcse", "risk_excess", "train_risk", "train_risk_id", "n_eval", "excess",
              "excess_cv", "excess_eval_mcse", "ce_excess", "gap_unpaired", "gap_unpaired_mcse", "converged",
              "n_converged", "iterations", "grad_norm", "restart_spread", "lipschitz", "eff_dim",
              "score_change", "isometry")

#: block means reported with their MCSE: name -> (long_name, units, description)
SUMMARY_VARS = {
    "gap_cv": ("E[G], control variate", "nat", "mean over blocks of G + R_hat(id) - R_k(id) (exactly zero-mean "
                                               "control); the main estimate of E[G]"),
    "gap": ("E[G], plain", "nat", "mean over blocks of R_k(phi_hat) - R_hat(phi_hat), R_k paired with the identity"),
    "gap_unpaired": ("E[G], unpaired population estimate", "nat",
                     "simkit.population.generalisation's G (R_k on its own anchors, identity-CE control)"),
    "excess_cv": ("E[E], control variate", "nat", "E = CE(phi_hat) - (R_hat - log k) plus the same control"),
    "excess": ("E[E], plain", "nat", "CE(phi_hat) - (R_hat(phi_hat) - log k)"),
    "risk_excess": ("R_k(phi_hat) - R_k(identity)", "nat", "paired on fresh tuples: approximation + estimation error"),
    "ce_excess": ("CE(phi_hat) - CE(identity)", "nat", "quadrature CE with the identity control variate"),
    "gap_eval_mcse": ("evaluation MCSE of G per block", "nat", "MCSE of the paired R_k difference within a block"),
    "converged": ("fraction of trainings converged", "1", "L-BFGS-B success flag of the best start"),
    "restart_spread": ("spread of final risks over starts", "nat", "max - min of R_hat over the restarts"),
    "iterations": ("L-BFGS-B iterations", "1", "of the best start"),
    "isometry": ("sigma_min / sigma_max of W", "1", "linear family: 1 for an isometry (the population optimum)"),
    "lipschitz": ("parameter-Lipschitz constant of phi", "1",
                  "sup over x and W of ||d phi_W(x) / d W||_2 (Fourier family: exact, 1/sqrt(3) for every d)"),
    "eff_dim": ("effective dimension of phi_hat(x)", "1",
                "participation ratio (sum lambda)^2 / sum lambda^2 of the covariance of phi_hat(x), x ~ pi"),
    "score_change": ("score change against the largest d", "1",
                     "mean over 1024 pairs x, y ~ pi of |phi_hat(x).phi_hat(y) - phi_ref(x).phi_ref(y)| / tau, phi_ref the "
                     "largest d of the sweep with the same W: how much d changes the function at fixed parameters"),
}

RAW_DESCR = {name: (v[0], v[1], v[2]) for name, v in SUMMARY_VARS.items()}
RAW_DESCR.update({
    "train_risk": ("R_hat(phi_hat)", "nat", "empirical risk of the trained embedding"),
    "train_risk_id": ("R_hat(identity)", "nat", "empirical risk of phi = identity on the same sample"),
    "n_eval": ("evaluation tuples", "1", "fresh tuples of the paired R_k estimate"),
    "excess_eval_mcse": ("evaluation MCSE of E per block", "nat", "MCSE of the CE estimate"),
    "gap_unpaired_mcse": ("MCSE of the unpaired G", "nat", "from simkit.population"),
    "n_converged": ("starts converged", "1", "of the restarts"),
    "grad_norm": ("final gradient norm", "1", "max abs component, best start"),
})

STUDY = Generalisation()

if __name__ == "__main__":
    from simkit.cli import main
    sys.exit(main(["run", "generalisation", *sys.argv[1:]]))
