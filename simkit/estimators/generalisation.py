"""One replicate of the generalisation gap of a trained embedding (claims C3, C5, C6): train phi_hat by ERM
on a sample, then estimate G = R_k(phi_hat) - R_hat(phi_hat) paired with a fixed reference embedding,
with an exactly zero-mean control variate, the excess E and diagnostics of the trained embedding.

:func:`gap_block` returns the quantities of :data:`GAP_BLOCK_STATS`. R_k(phi_hat) - R_k(reference) is
estimated on fresh tuples with common random numbers (:func:`simkit.estimators.population.paired_risk_difference`);
R_k(reference) is exact where known (``risk_id``), and cancels from the control-variate G where it is not.
"""

from __future__ import annotations

import math

import numpy as np

from simkit.distributions.sphere import Uniform
from simkit.exact import formulas as exact

from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.lifted import LIFT_SEED, FourierEmbedding, LiftedRisk
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train
from simkit.estimators.population import generalisation, paired_risk_difference

__all__ = ["gap_block", "identity_constants", "GAP_BLOCK_STATS", "IDENTITY_CONSTANTS", "DIAG_POINTS"]

#: caps on embedded points (and on points x d values, Fourier family) per evaluation chunk: bounds memory
CHUNK_POINTS = 1 << 18
CHUNK_VALUES = 1 << 22
#: points x ~ pi (and as many y) for the effective-dimension and score-change diagnostics of the Fourier family
DIAG_POINTS = 1024

#: per-block outputs of :func:`gap_block` (NaN where not applicable): name -> (long_name, in nats?, description)
GAP_BLOCK_STATS = {
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
                     f"mean over {DIAG_POINTS} pairs x, y ~ pi of |phi_hat(x).phi_hat(y) - phi_ref(x).phi_ref(y)| / "
                     "tau, phi_ref the largest d of the sweep with the same W: how much d changes the function at "
                     "fixed parameters"),
    "isometry": ("sigma_min / sigma_max of W", False, "linear family: 1 for an isometry (the population optimum)"),
}

#: outputs of :func:`identity_constants`: name -> (long name, description)
IDENTITY_CONSTANTS = {"risk_id": ("R_k(identity)", "log k + CE(id) + gap_k(id), exact"),
                      "ce_id": ("CE(identity)", "simkit.exact.cross_entropy (exact for uniform pi)"),
                      "gap_id": ("gap_k(identity)", "R_k - log k - CE for phi = identity (simkit.exact.gap_exact)"),
                      "entropy": ("H = -I(x; x+)", "minimum of CE over all Q (simkit.exact.mutual_information; NaN unless pi "
                                  "is uniform and the kernel isotropic)"),
                      "c1_id": ("C1 constant c1 of the identity", "c1 = E[m1/Z - (Z2/Z^2 - 1)/2] for phi = identity at the "
                                "point's tau (simkit.exact.bias_constant; Monte Carlo over x for the rotated kernel)")}


def gap_block(sample: TrainingSample, pi, kernel, tau: float, *, family: str, d: int, reference: LinearEmbedding,
              seeds, restarts: int, n_eval: int, risk_id: float, ce_id: float, excess_anchors: int = 0,
              excess_positives: int = 0, d_ref: int | None = None) -> dict[str, np.ndarray]:
    """One replicate: ERM of phi_hat on ``sample`` and its gap, excess and diagnostics (:data:`GAP_BLOCK_STATS`).

    ``family``: "linear" (phi = Wx/|Wx|, d = p) or "fourier" (the lift of dimension ``d``, frame from
    ``LIFT_SEED``; ``d_ref`` the largest d of the sweep for the score-change diagnostic). ``seeds``: seed
    sequences of the initial W, the restarts and the evaluation (split into paired R_k, CE and diagnostics).
    ``reference``: the fixed embedding of the pairing and the control; ``risk_id`` its exact R_k (NaN if
    unknown) and ``ce_id`` its CE. ``excess_anchors`` > 0 estimates the excess E (linear family only).
    """
    s_init, s_restart, s_eval = seeds
    s_pair, s_ce, s_diag = s_eval.spawn(3)
    p, k = sample.p, sample.k
    lifted = family == "fourier"
    init_rng = np.random.default_rng(s_init)
    if lifted:  # the same W0 at every d (FourierEmbedding.random_like's law)
        init = FourierEmbedding.frame(p, d, W=init_rng.standard_normal((p, p)), seed=LIFT_SEED)
        risk = LiftedRisk(sample, tau)
    else:
        init = LinearEmbedding.random(p, p, rng=init_rng)
        risk = EmpiricalRisk(sample, tau)
    res = train(risk, init, restarts=restarts, rng=s_restart)
    phi = res.embedding
    train_risk = risk.value(phi)
    train_risk_id = EmpiricalRisk(sample, tau).value(reference)

    # R_k(phi_hat) - R_k(reference) on fresh tuples, paired
    cap = CHUNK_POINTS if not lifted else min(CHUNK_POINTS, CHUNK_VALUES // d)
    chunk = max(1, cap // (k + 2))
    risk_diff, risk_diff_mcse = paired_risk_difference(phi, reference, pi, kernel, k, n_eval, tau=tau, chunk=chunk,
                                                       rng=s_pair, risk=LiftedRisk if lifted else EmpiricalRisk)
    gap = risk_id + risk_diff - train_risk
    control = train_risk_id - risk_id  # exactly zero mean over training samples
    # R_k(id) cancels from the control-variate G: where it is not known exactly (NaN), G_cv is still exact
    gap_cv = gap + control if math.isfinite(risk_id) else risk_diff - train_risk + train_risk_id

    out = {name: np.nan for name in GAP_BLOCK_STATS}
    out.update(gap=gap, gap_cv=gap_cv, gap_eval_mcse=risk_diff_mcse, risk_excess=risk_diff,
               train_risk=train_risk, train_risk_id=train_risk_id, n_eval=n_eval)
    if not lifted and excess_anchors > 0:
        g = generalisation(phi, risk, pi, kernel, rng=s_ce, n_anchors=max(8, excess_anchors),
                           n_positives=excess_positives)
        out.update(excess=g.excess, excess_cv=g.excess + control, excess_eval_mcse=g.excess_mcse,
                   ce_excess=g.population.cross_entropy - ce_id, gap_unpaired=g.gap, gap_unpaired_mcse=g.gap_mcse)
    reports = res.reports
    values = np.array([r.value for r in reports])
    out.update(converged=float(res.report.converged), n_converged=float(sum(r.converged for r in reports)),
               iterations=float(res.report.iterations), grad_norm=res.report.grad_norm,
               restart_spread=float(values.max() - values.min()))
    if lifted:
        diag_rng = np.random.default_rng(s_diag)
        xd, yd = pi.rvs(DIAG_POINTS, rng=diag_rng), pi.rvs(DIAG_POINTS, rng=diag_rng)
        f = phi(xd)
        ev = np.clip(np.linalg.eigvalsh(np.cov(f, rowvar=False)), 0.0, None)
        ref = FourierEmbedding.frame(p, d_ref, W=phi.W, seed=LIFT_SEED)
        change = np.abs(np.sum(f * phi(yd), axis=1) - np.sum(ref(xd) * ref(yd), axis=1)) / tau
        out.update(eff_dim=float(ev.sum() ** 2 / np.sum(ev ** 2)), score_change=float(np.mean(change)),
                   lipschitz=phi.param_lipschitz())
    else:
        sv = np.linalg.svd(phi.W, compute_uv=False)
        out.update(isometry=float(sv[-1] / sv[0]))
    return {name: np.asarray(v, dtype=float) for name, v in out.items()}


def identity_constants(pi, kernel, tau: float, k: int, *, rng) -> dict[str, np.ndarray]:
    """Exact constants of phi = identity: ``ce_id`` (CE; exact for uniform or single-vMF pi), ``c1_id`` (c1;
    Monte Carlo over x from ``rng`` where there is no quadrature), and, for uniform pi with an isotropic
    kernel only (NaN elsewhere: R_k(id) is then unknown and only the control-variate G is estimated),
    ``gap_id`` = gap_k, ``risk_id`` = log k + CE + gap_k and ``entropy`` = -I(x; x+)."""
    p = pi.dim
    ce = exact.cross_entropy(pi, kernel, tau, rng=rng)
    ce_id = float(getattr(ce, "value", ce))
    c1 = exact.bias_constant(pi, kernel, tau, rng=rng)
    uniform_iso = isinstance(pi, Uniform) and kernel.isotropic
    gap_id = float(exact.gap_exact(kernel, p, tau, [k])[0]) if uniform_iso else math.nan
    return {"ce_id": np.array(ce_id), "gap_id": np.array(gap_id), "risk_id": np.array(math.log(k) + ce_id + gap_id),
            "entropy": np.array(-exact.mutual_information(kernel, p) if uniform_iso else math.nan),
            "c1_id": np.array(float(getattr(c1, "value", c1)))}
