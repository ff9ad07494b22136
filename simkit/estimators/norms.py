"""Embeddings before normalisation: the InfoNCE gap's sensitivity to the norms of the negatives' embeddings (C5).

docs/theory.md sections 3 and 14, claim C5: as tau -> 0 the generalisation gap grows and becomes sensitive
to the norms of the negatives' embeddings. With unit-norm embeddings (every other module of simkit) the
norms are all 1 and the clause cannot be tested. Here the embedding keeps a norm:

    psi(x) = r(x) u(x),   u = phi_W(x) = W x / |W x|  (a :class:`simkit.embeddings.embedding.LinearEmbedding`),
    r(x) = exp(beta a.x)  (a fixed :class:`NormProfile`, varying across points),
    s(x, y) = psi(x).psi(y) / tau = r(x) r(y) u(x).u(y) / tau,   |s| <= e^{2 beta} / tau.

The norm profile is fixed, not trained: if the norms were free parameters (an unnormalised linear map
W x), the trained scale would absorb 1/tau and the temperature would have no effect on the class.

Scaling the k negatives' embeddings by e^eps gives ``dl^eps/deps = sum_{j>=1} p_j s_j`` at 0
(:func:`loss_derivative`), a softmax average; the **sensitivity** ``S = dG^eps/deps`` of a trained
phi_hat's gap is estimated by :func:`gap_sensitivity`, pathwise and by a central finite difference with
common random numbers. Control (``mode="ignored"``): the same change of the norms in a component the
score ignores, so S = 0 exactly. Derivation: docs/design.md, "simkit.estimators.norms".

Points on the last axis: x of shape (n, p), negatives (n, k, p).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize
from scipy.special import logsumexp

from simkit._checks import check_scalar
from simkit.distributions.kernels import VMFKernel
from simkit.distributions.sphere import Uniform
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.training import TrainingSample

__all__ = ["norm_block", "NORM_BLOCK_STATS", "NormProfile", "ScaledRisk", "MODES", "loss_derivative", "train_scaled", "GapSensitivity",
           "gap_sensitivity", "FD_STEP"]

#: perturbation modes: scale the negatives' embeddings, or change their norms in a score-ignored component
MODES = ("scale", "ignored")
#: central finite-difference step in eps; h * max|s| <= 0.02 at tau = 0.02, beta = 0.5 (relative error ~1e-4)
FD_STEP = 1e-4


@dataclass(frozen=True)
class NormProfile:
    """Norm factor ``r(x) = exp(beta a.x)`` of the embedding before normalisation.

    Parameters
    ----------
    beta : float
        Amplitude, >= 0 (``beta = 0``: unit norms). ``r`` ranges over ``[e^-beta, e^beta]``.
    direction : array_like, shape (p,)
        Unit vector a.
    """

    beta: float
    direction: tuple[float, ...]

    def __post_init__(self):
        b = check_scalar("beta", self.beta, low=0.0)
        a = np.asarray(self.direction, dtype=float)
        if a.ndim != 1 or a.size < 2 or not np.all(np.isfinite(a)) or abs(float(np.linalg.norm(a)) - 1.0) > 1e-12:
            raise ValueError(f"'direction' must be a unit vector of length >= 2, got {self.direction!r}")
        object.__setattr__(self, "beta", float(b))
        object.__setattr__(self, "direction", tuple(float(v) for v in a))

    @classmethod
    def axis(cls, beta: float, p: int) -> NormProfile:
        """``a = e_1`` in R^p."""
        return cls(beta, tuple(np.eye(p)[0]))

    def __call__(self, x: ArrayLike) -> NDArray[np.float64]:
        """r(x) for points ``(..., p)``: shape ``(...)``."""
        return np.exp(self.beta * (np.asarray(x, dtype=float) @ np.asarray(self.direction)))

    @property
    def r_max(self) -> float:
        return math.exp(self.beta)


def _unit(phi: LinearEmbedding, x: NDArray) -> NDArray[np.float64]:
    """u = Wx/|Wx| on points already validated (the sample's); full column rank keeps |Wx| > 0."""
    h = x @ phi.W.T
    return h / np.sqrt(np.sum(h * h, axis=-1, keepdims=True))


def _scores(phi: LinearEmbedding, risk: ScaledRisk, eps: float, mode: str):
    """(scores (n, k + 1) with the positive in column 0, and the pieces the gradient needs)."""
    sample, tau = risk.sample, risk.tau
    if not isinstance(phi, LinearEmbedding) or phi.p != sample.p:
        raise ValueError(f"'phi' must be a LinearEmbedding on R^{sample.p}, got {phi!r}")
    if mode not in MODES:
        raise ValueError(f"'mode' must be one of {MODES}, got {mode!r}")
    u, v, w = risk._units(phi)
    c0, cj = risk._c0, risk._cj
    s0 = c0 * np.sum(u * v, axis=1) / tau
    if mode == "scale":
        cj_eps = cj * math.exp(eps)
        sj = cj_eps * np.einsum("nd,nkd->nk", u, w) / tau
        return np.column_stack([s0, sj]), (u, v, w, c0, cj_eps)
    # mode "ignored": every point carries psi~(x) = (r(x) u(x), z(x)) in R^{d+1} with z = r; the score
    # form projects the last coordinate out, s = psi~(x)^T P psi~(y) / tau, P = diag(1, ..., 1, 0). The
    # negatives' z is set so that |psi~_eps(y)| = e^eps |psi~(y)| = e^eps sqrt(2) r(y), i.e.
    # z_eps^2 = r^2 (2 e^{2 eps} - 1), the same relative change of the norms as in mode "scale".
    grow = 2.0 * math.exp(2.0 * eps) - 1.0
    if not grow > 0:
        raise ValueError(f"'eps' must be > -log(2)/2 in mode 'ignored', got {eps}")
    ra = np.sqrt(c0 / risk.profile(sample.x_pos))  # r(x)
    rn = cj / ra[:, None]  # r(y_j)
    anchor = np.concatenate([ra[:, None] * u, ra[:, None]], axis=1)
    neg = np.concatenate([rn[..., None] * w, (rn * math.sqrt(grow))[..., None]], axis=2)
    proj = np.ones(u.shape[1] + 1)
    proj[-1] = 0.0
    sj = np.einsum("nd,nkd->nk", anchor * proj, neg) / tau
    return np.column_stack([s0, sj]), (u, v, w, c0, cj)


def loss_derivative(scores: ArrayLike) -> NDArray[np.float64]:
    """``dl^eps/deps`` at the given scores under ``s_j -> e^eps s_j`` (j >= 1): ``sum_{j>=1} p_j s_j``.

    Parameters
    ----------
    scores : array_like, shape (n, k + 1)
        Column 0 the positive's score, columns 1.. the negatives'.
    """
    s = np.asarray(scores, dtype=float)
    if s.ndim != 2 or s.shape[1] < 2:
        raise ValueError(f"'scores' must have shape (n, k + 1) with k >= 1, got {s.shape}")
    p = np.exp(s - logsumexp(s, axis=1, keepdims=True))
    return np.sum(p[:, 1:] * s[:, 1:], axis=1)


class ScaledRisk:
    """Empirical InfoNCE risk of ``psi = r u_W`` on a fixed :class:`~simkit.embeddings.training.TrainingSample`.

    Parameters
    ----------
    sample : TrainingSample
    tau : float
        Temperature, > 0.
    profile : NormProfile
        The norm factor r (its direction must have the sample's dimension p).
    """

    def __init__(self, sample: TrainingSample, tau: float, profile: NormProfile):
        if not isinstance(sample, TrainingSample):
            raise ValueError(f"'sample' must be a TrainingSample, got {type(sample).__name__}")
        if not isinstance(profile, NormProfile):
            raise ValueError(f"'profile' must be a NormProfile, got {type(profile).__name__}")
        if len(profile.direction) != sample.p:
            raise ValueError(f"'profile' must act on R^{sample.p} (the sample's dimension), got a direction of "
                             f"length {len(profile.direction)}")
        self.sample, self.profile = sample, profile
        self.tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
        n, k, p = sample.n, sample.k, sample.p
        self._neg = sample.negatives if not sample.shared else np.broadcast_to(sample.negatives, (n, k, p))
        ru = profile(sample.x)
        self._c0 = ru * profile(sample.x_pos)
        self._cj = ru[:, None] * profile(self._neg)
        self._memo: list = []

    def _units(self, phi: LinearEmbedding) -> tuple[NDArray, NDArray, NDArray]:
        """``(u(x), u(x+), u(y_j))`` of ``phi`` on the sample, read-only. The last two W's are remembered (by
        their exact bytes): :func:`norm_block` evaluates the same phi_hat on the same tuples in both modes."""
        key = (phi.W.shape, phi.W.tobytes())
        for known, units in self._memo:
            if known == key:
                return units
        units = (_unit(phi, self.sample.x), _unit(phi, self.sample.x_pos), _unit(phi, self._neg))
        for a in units:
            a.setflags(write=False)
        self._memo = [(key, units), *self._memo[:1]]
        return units

    def scores(self, phi: LinearEmbedding, eps: float = 0.0, mode: str = "scale") -> NDArray[np.float64]:
        """Scores (n, k + 1), positive in column 0, with the negatives' norms multiplied by e^eps."""
        return _scores(phi, self, float(eps), mode)[0]

    def losses(self, phi: LinearEmbedding, eps: float = 0.0, mode: str = "scale") -> NDArray[np.float64]:
        """Per-tuple losses ``l^eps`` (nats), shape (n,)."""
        s = self.scores(phi, eps, mode)
        return logsumexp(s, axis=1) - s[:, 0]

    def derivatives(self, phi: LinearEmbedding, mode: str = "scale") -> NDArray[np.float64]:
        """Per-tuple ``dl^eps/deps`` at eps = 0, shape (n,); identically 0 in mode 'ignored'."""
        if mode == "ignored":
            self.scores(phi, 0.0, mode)  # validates
            return np.zeros(self.sample.n)
        return loss_derivative(self.scores(phi, 0.0, mode))

    def value_and_grad(self, phi: LinearEmbedding) -> tuple[float, NDArray[np.float64]]:
        """``(R_hat, dR_hat/dW)`` at eps = 0; the gradient has the layout of ``phi.params``.

        With ``s_0 = c_0 u.v/tau``, ``s_j = c_j u.w_j/tau`` (c the products of the norm factors):
        ``dl/du = ((p_0 - 1) c_0 v + sum_j p_j c_j w_j)/tau``, ``dl/dv = (p_0 - 1) c_0 u/tau``,
        ``dl/dw_j = p_j c_j u/tau``, then back through u = Wx/|Wx| (:meth:`Embedding.vjp`).
        """
        s, (u, v, w, c0, cj) = _scores(phi, self, 0.0, "scale")
        neg = self._neg
        n, k, p = self.sample.n, self.sample.k, self.sample.p
        lse = logsumexp(s, axis=1)
        prob = np.exp(s - lse[:, None])
        a0 = (prob[:, 0] - 1.0) * c0
        pc = prob[:, 1:] * cj
        g_u = (a0[:, None] * v + np.einsum("nk,nkd->nd", pc, w)) / (self.tau * n)
        g_v = a0[:, None] * u / (self.tau * n)
        g_w = (pc[:, :, None] * u[:, None, :]).reshape(n * k, -1) / (self.tau * n)
        grad = (phi.vjp(self.sample.x, g_u) + phi.vjp(self.sample.x_pos, g_v) + phi.vjp(neg.reshape(-1, p), g_w))
        return float(np.mean(lse - s[:, 0])), grad


def train_scaled(risk: ScaledRisk, init: LinearEmbedding, *, maxiter: int = 2000, gtol: float = 1e-9,
                 ftol: float = 1e-13) -> tuple[LinearEmbedding, dict]:
    """ERM of W by L-BFGS-B (deterministic) from ``init``: (phi_hat, {converged, iterations, grad_norm, value})."""
    if not isinstance(risk, ScaledRisk):
        raise ValueError(f"'risk' must be a ScaledRisk, got {type(risk).__name__}")

    def fun(theta):
        return risk.value_and_grad(init._unchecked(theta))

    res = optimize.minimize(fun, np.array(init.params, dtype=float), jac=True, method="L-BFGS-B",
                            options={"maxiter": int(maxiter), "gtol": gtol, "ftol": ftol, "maxcor": 20})
    phi = init.with_params(res.x)
    return phi, {"converged": bool(res.success), "iterations": int(res.nit),
                 "grad_norm": float(np.max(np.abs(res.jac))), "value": float(res.fun)}


@dataclass(frozen=True)
class GapSensitivity:
    """One training sample's gap and its sensitivity to the negatives' norms (all in nats)."""

    gap: float          # G = mean l(fresh) - mean l(train) at eps = 0
    sens: float         # dG/deps, pathwise: mean dl/deps (fresh) - mean dl/deps (train)
    sens_fd: float      # the same by central finite difference (G^{+h} - G^{-h}) / 2h, common random numbers
    sens_eval_mcse: float  # MCSE of the fresh-tuple mean of dl/deps (evaluation noise within the sample)
    gap_eval_mcse: float


def _lse_losses(s: NDArray) -> NDArray[np.float64]:
    return logsumexp(s, axis=1) - s[:, 0]


def gap_sensitivity(phi: LinearEmbedding, train: ScaledRisk, fresh: ScaledRisk, *, mode: str = "scale",
                    h: float = FD_STEP) -> GapSensitivity:
    """G and ``S = dG^eps/deps`` at eps = 0 of ``phi`` (trained on ``train.sample``; fresh tuples ``fresh``).

    ``G^eps = mean_fresh l^eps(phi) - mean_train l^eps(phi)``; S pathwise (``sum_j p_j s_j``, see
    :func:`loss_derivative`) and by the central difference with step ``h`` on the same phi and the same
    tuples (common random numbers: the scores at +h and -h are those at 0 with the perturbation applied).
    """
    h = check_scalar("h", h, low=0.0, low_inclusive=False)
    if train.tau != fresh.tau or train.profile != fresh.profile:
        raise ValueError("'train' and 'fresh' must have the same tau and profile")
    if mode not in MODES:
        raise ValueError(f"'mode' must be one of {MODES}, got {mode!r}")
    out = {}
    for name, risk in (("fresh", fresh), ("train", train)):
        s = risk.scores(phi, 0.0, mode)
        if mode == "scale":  # s_j -> e^{+-h} s_j on the same scores: the perturbation is exactly this
            sp, sm = s.copy(), s.copy()
            sp[:, 1:] *= math.exp(h)
            sm[:, 1:] *= math.exp(-h)
            deriv = loss_derivative(s)
        else:
            sp, sm = risk.scores(phi, h, mode), risk.scores(phi, -h, mode)
            deriv = np.zeros(s.shape[0])
        out[name] = (_lse_losses(s), deriv, _lse_losses(sp) - _lse_losses(sm))
    (lf, df, ff), (lt, dt, ft) = out["fresh"], out["train"]
    nf = lf.size
    return GapSensitivity(gap=float(lf.mean() - lt.mean()), sens=float(df.mean() - dt.mean()),
                          sens_fd=float(ff.mean() - ft.mean()) / (2.0 * h),
                          sens_eval_mcse=float(df.std(ddof=1) / math.sqrt(nf)),
                          gap_eval_mcse=float(lf.std(ddof=1) / math.sqrt(nf)))


#: per-block outputs of :func:`norm_block`: name -> (long name, in nats, description)
NORM_BLOCK_STATS = {
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


def norm_block(kappa_m: float, tau: float, beta: float, n: int, k: int, n_eval: int, seeds, *, dim: int = 3,
               maxiter: int = 2000) -> dict[str, float]:
    """One replicate of the norms design (claim C5) at temperature ``tau``: train u_W on a sample of ``n``
    tuples (``k`` negatives, pi uniform on S^(dim-1), vMF(kappa_m) positives) under psi = r u_W with
    ``NormProfile.axis(beta, dim)``, then G and S (:func:`gap_sensitivity`) of phi_hat on ``n_eval`` fresh
    tuples, of the fixed reference (identity) and with the score-ignored component.

    ``seeds``: three seed sequences (training sample, initial W, fresh tuples); sharing them across tau
    gives common random numbers. Returns the values named in :data:`NORM_BLOCK_STATS` (``skipped`` 0).
    """
    s_sample, s_init, s_eval = seeds
    pi, kernel = Uniform(dim), VMFKernel(kappa_m)
    sample = TrainingSample.draw(pi, kernel, n, k, rng=np.random.default_rng(s_sample))
    init = LinearEmbedding.random(dim, dim, rng=np.random.default_rng(s_init))
    fresh = TrainingSample.draw(pi, kernel, n_eval, k, rng=np.random.default_rng(s_eval))
    profile = NormProfile.axis(beta, dim)
    train_risk, fresh_risk = ScaledRisk(sample, tau, profile), ScaledRisk(fresh, tau, profile)
    phi, rep = train_scaled(train_risk, init, maxiter=maxiter)
    a = gap_sensitivity(phi, train_risk, fresh_risk)
    ref = gap_sensitivity(LinearEmbedding.identity(dim), train_risk, fresh_risk)
    ign = gap_sensitivity(phi, train_risk, fresh_risk, mode="ignored")
    return dict(gap=a.gap, gap_ref=ref.gap, gap_cv=a.gap - ref.gap, sens=a.sens, sens_fd=a.sens_fd, sens_ref=ref.sens,
                sens_cv=a.sens - ref.sens, sens_ignored=ign.sens_fd, sens_eval_mcse=a.sens_eval_mcse,
                gap_eval_mcse=a.gap_eval_mcse, train_risk=rep["value"], converged=float(rep["converged"]),
                iterations=float(rep["iterations"]), grad_norm=rep["grad_norm"], skipped=0.0)
