"""Empirical InfoNCE risk of a trainable embedding, its analytic gradient, and a deterministic trainer.

docs/theory.md sections 1 and 3 (claim C3): for a fixed training sample of n tuples
``(x_i, x+_i, y_i1..y_ik)`` the empirical risk of an embedding phi_theta is

    R_hat_{n,k}(theta) = (1/n) sum_i l_k(theta; x_i, x+_i, y_i1..y_ik),
    l_k = -s_0 + log(e^{s_0} + sum_{j<=k} e^{s_j}),  s_0 = phi(x).phi(x+)/tau,  s_j = phi(x).phi(y_j)/tau.

* :class:`TrainingSample` -- the n tuples. Negatives are i.i.d. from pi and independent across
  tuples, as in docs/theory.md (shape ``(n, k, p)``), or one set of k negatives shared by every tuple
  (shape ``(k, p)``; ``shared=True``): each tuple's loss keeps its law, but the n losses are no
  longer independent, so R_hat is not a mean of i.i.d. terms (the C3 bound assumes they are).
  Sharing embeds n + k points per evaluation instead of n (k + 2) and stores k instead of n k
  negatives, which is what makes large n k feasible.
* :class:`EmpiricalRisk` -- value, per-tuple losses and the analytic gradient in theta, computed in
  Numba (:mod:`simkit._jit.training`), parallel over tuples and bit-reproducible for any thread
  count; a pure-NumPy reference (:func:`_reference_value_and_grad`) is kept for the tests.
  Optional per-tuple weights (Rademacher signs give the empirical Rademacher process of the loss
  class) and the softmax weights p_ij (the averaging weights of claim C4).
* :func:`train` -- L-BFGS-B (scipy) from a given initialisation, optional random restarts, and a
  :class:`ConvergenceReport` per start.

The gradient (chain rule through the softmax, the normalisation phi = h/|h| and the linear or
two-layer map) is derived in docs/design.md, "simkit.embeddings.training"; it is validated by
central finite differences to 1e-6 relative and the NumPy reference to ~1e-13 (tests/embeddings/test_training.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize
from scipy.special import logsumexp

from simkit._jit import training as _jit
from simkit._jit.blas import single_threaded_blas
from simkit._checks import check_int, check_points, check_rng, check_scalar
from simkit.embeddings.embedding import Embedding
from simkit.distributions.kernels import MarkovKernel
from simkit.distributions.sphere import SphereDistribution

__all__ = ["TrainingSample", "EmpiricalRisk", "ConvergenceReport", "TrainResult", "train", "checkpoints"]


# ----------------------------------------------------------------------------------------------
# the training sample

class TrainingSample:
    """A fixed training sample of n InfoNCE tuples on S^{p-1} (points on the last axis).

    Parameters
    ----------
    x, x_pos : array_like, shape (n, p)
        Anchors and their positives (unit vectors).
    negatives : array_like, shape (n, k, p) or (k, p)
        Negatives: one set of k per tuple (independent, docs/theory.md section 1), or a single set of k
        shared by every tuple (2-D input; see the module notes).

    Attributes
    ----------
    n, k, p : int
    shared : bool
        True for one shared negative set.
    """

    def __init__(self, x: ArrayLike, x_pos: ArrayLike, negatives: ArrayLike):
        x = check_points("x", x, min_ndim=2)
        if x.ndim != 2 or x.shape[0] < 1:
            raise ValueError(f"'x' must have shape (n, p) with n >= 1, got {x.shape}")
        n, p = x.shape
        xp = check_points("x_pos", x_pos, p)
        if xp.shape != x.shape:
            raise ValueError(f"'x_pos' must have the shape of 'x' {x.shape}, got {xp.shape}")
        y = check_points("negatives", negatives, p)
        if y.ndim == 3:
            if y.shape[0] != n or y.shape[1] < 1:
                raise ValueError(f"'negatives' must have shape (n, k, p) = ({n}, k, {p}) with k >= 1, got {y.shape}")
        elif y.ndim == 2:
            if y.shape[0] < 1:
                raise ValueError(f"'negatives' must hold k >= 1 shared negatives, got shape {y.shape}")
        else:
            raise ValueError(f"'negatives' must have shape (n, k, p) (one set per tuple) or (k, p) (shared), "
                             f"got {y.shape}")
        unit = lambda a: np.ascontiguousarray(a / np.sqrt(np.sum(a * a, axis=-1, keepdims=True)))  # noqa: E731
        self.x, self.x_pos, self.negatives = unit(x), unit(xp), unit(y)
        for a in (self.x, self.x_pos, self.negatives):
            a.flags.writeable = False
        self._frozen = True

    def __setattr__(self, name, value):
        if getattr(self, "_frozen", False):
            raise AttributeError("TrainingSample is immutable; create a new instance")
        object.__setattr__(self, name, value)

    @property
    def n(self) -> int:
        return self.x.shape[0]

    @property
    def p(self) -> int:
        return self.x.shape[1]

    @property
    def k(self) -> int:
        return self.negatives.shape[-2]

    @property
    def shared(self) -> bool:
        return self.negatives.ndim == 2

    def __repr__(self):
        return f"TrainingSample(n={self.n}, k={self.k}, p={self.p}, shared={self.shared})"

    @classmethod
    def draw(cls, pi: SphereDistribution, kernel: MarkovKernel, n: int, k: int, *, rng=None,
             shared: bool = False) -> TrainingSample:
        """n tuples: ``x ~ pi``, ``x+ ~ M(x, .)``, then the negatives ``~ pi`` i.i.d. (``(n, k)`` of
        them, or ``k`` shared ones), drawn in that order from ``rng``."""
        if not isinstance(pi, SphereDistribution):
            raise ValueError(f"'pi' must be a simkit sphere distribution, got {type(pi).__name__}")
        if not isinstance(kernel, MarkovKernel):
            raise ValueError(f"'kernel' must be a simkit Markov kernel, got {type(kernel).__name__}")
        n = check_int("n", n, low=1)
        k = check_int("k", k, low=1)
        if not isinstance(shared, (bool, np.bool_)):
            raise ValueError(f"'shared' must be True or False, got {shared!r}")
        rng = check_rng(rng)
        x = pi.rvs(n, rng=rng)
        xp = kernel.sample(x, rng=rng)
        y = pi.rvs(k, rng=rng) if shared else pi.rvs((n, k), rng=rng)
        return cls(x, xp, y)


# ----------------------------------------------------------------------------------------------
# the empirical risk

def _check_embedding(phi, p: int) -> Embedding:
    if not isinstance(phi, Embedding):
        raise ValueError(f"'phi' must be a simkit Embedding (LinearEmbedding, TwoLayerEmbedding), "
                         f"got {type(phi).__name__}")
    if phi.p != p:
        raise ValueError(f"'phi' must take points in R^{p} (the sample's dimension), got an embedding with p = {phi.p}")
    return phi


def _raise_if_undefined(minnorm: NDArray, floor: float, where: str) -> None:
    mn = float(np.min(minnorm)) if minnorm.size else np.inf
    if not mn > floor:
        raise ValueError(f"'phi' is undefined at a point of the {where}: its raw output h vanishes "
                         f"(|h| = {mn:.3g} <= floor {floor:.3g}); perturb the parameters")


class EmpiricalRisk:
    """The empirical InfoNCE risk ``R_hat_{n,k}(theta)`` of a fixed :class:`TrainingSample`.

    Parameters
    ----------
    sample : TrainingSample
    tau : float
        Temperature, > 0 (every exponential is max-shifted, so any tau > 0 is safe).
    weights : array_like, shape (n,), optional
        Real per-tuple weights w_i: the objective becomes ``(1/n) sum_i w_i l_i`` (value and
        gradient). With Rademacher signs this is the empirical Rademacher process of the loss class
        (its supremum over theta is found by minimising with weights ``-sigma``). Default: all 1.

    Notes
    -----
    Cost per evaluation: n (k + 2) embeddings and n (k + 1) scores of length d (independent
    negatives); n + k embeddings and 2 n k scores (shared: the negative side is a second pass).
    """

    def __init__(self, sample: TrainingSample, tau: float, *, weights: ArrayLike | None = None):
        if not isinstance(sample, TrainingSample):
            raise ValueError(f"'sample' must be a TrainingSample, got {type(sample).__name__}")
        self.sample = sample
        self.tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
        if weights is None:
            w = np.ones(sample.n)
            self.weighted = False
        else:
            try:
                raw = np.asarray(weights)
                if raw.dtype.kind not in "iuf":
                    raise TypeError
                w = raw.astype(float)
            except (TypeError, ValueError):
                raise ValueError(f"'weights' must be an array of real numbers, got {type(weights).__name__}") from None
            if w.shape != (sample.n,):
                raise ValueError(f"'weights' must have shape (n,) = ({sample.n},), got {w.shape}")
            if not np.all(np.isfinite(w)):
                raise ValueError("'weights' must be finite (no NaN or inf)")
            w = w.copy()
            self.weighted = True
        w.flags.writeable = False
        self.weights = w

    def __repr__(self):
        s = self.sample
        return (f"EmpiricalRisk(n={s.n}, k={s.k}, p={s.p}, tau={self.tau:g}, shared={s.shared}, "
                f"weighted={self.weighted})")

    @property
    def n(self) -> int:
        return self.sample.n

    @property
    def k(self) -> int:
        return self.sample.k

    def losses(self, phi: Embedding) -> NDArray[np.float64]:
        """Per-tuple losses ``l_k(theta; x_i, x+_i, y_i.)``, shape ``(n,)`` (unweighted)."""
        phi = _check_embedding(phi, self.sample.p)
        return self._run(phi, want_grad=False)[0]

    def value(self, phi: Embedding) -> float:
        """``R_hat_{n,k}`` at phi (nats); ``(1/n) sum_i w_i l_i`` if weighted."""
        return self._mean(self.losses(phi))

    def _mean(self, losses: NDArray) -> float:
        return float(np.mean(self.weights * losses)) if self.weighted else float(np.mean(losses))

    def value_and_grad(self, phi: Embedding) -> tuple[float, NDArray[np.float64]]:
        """``(R_hat_{n,k}(theta), dR_hat/dtheta)``; the gradient has the layout of ``phi.params``."""
        phi = _check_embedding(phi, self.sample.p)
        losses, grad = self._run(phi, want_grad=True)
        return self._mean(losses), grad

    def softmax_weights(self, phi: Embedding) -> NDArray[np.float64]:
        """Softmax weights ``p_ij = e^{s_ij} / sum_l e^{s_il}``, shape ``(n, k + 1)``; column 0 is the
        positive. ``dl_i/ds_i0 = p_i0 - 1`` and ``dl_i/ds_ij = p_ij``: the Gateaux derivative of the
        log-sum-exp along a perturbation of the negatives' embeddings is the p-weighted *average*
        over the negatives (claim C4). NumPy, O(n k) memory."""
        phi = _check_embedding(phi, self.sample.p)
        scores = _scores(phi, self.sample, self.tau)[0]
        return np.exp(scores - logsumexp(scores, axis=1, keepdims=True))

    def objective(self, template: Embedding):
        """``theta -> (R_hat, gradient)`` for optimisers, in the family and shapes of ``template``."""
        template = _check_embedding(template, self.sample.p)

        def fun(theta):
            losses, grad = self._run(template._unchecked(theta), want_grad=True)
            return self._mean(losses), grad

        return fun

    def _run(self, phi: Embedding, want_grad: bool) -> tuple[NDArray, NDArray | None]:
        s = self.sample
        fam, theta, p, d, m, floor = phi._jit_args()
        aux = _jit.transposed_weights(fam, theta, p, d, m)
        inv_tau = 1.0 / self.tau
        n = s.n
        npar = theta.size if want_grad else 1
        losses = np.empty(n)
        gparts = np.zeros((_jit.n_chunks(n), npar))
        minnorm = np.empty(_jit.n_chunks(n))
        if not s.shared:
            _jit.risk_independent(fam, theta, aux, p, d, m, s.x, s.x_pos, s.negatives, inv_tau, self.weights,
                                  want_grad, losses, gparts, minnorm)
            _raise_if_undefined(minnorm, floor, "training sample")
            if not want_grad:
                return losses, None
            return losses, np.sum(gparts, axis=0) / n
        k = s.k
        wphi = np.empty((k, d))
        wnorm = np.empty(k)
        wt = np.empty((k, max(m, 1)))
        wmin = np.empty(_jit.n_chunks(k))
        _jit.embed_points(fam, theta, aux, p, d, m, s.negatives, wphi, wnorm, wt, wmin)
        _raise_if_undefined(wmin, floor, "shared negatives")
        lse = np.empty(n)
        uphi = np.empty((n, d))
        _jit.risk_shared_anchors(fam, theta, aux, p, d, m, s.x, s.x_pos, wphi, inv_tau, self.weights, want_grad,
                                 losses, lse, uphi, gparts, minnorm)
        _raise_if_undefined(minnorm, floor, "training sample")
        if not want_grad:
            return losses, None
        gneg = np.zeros((_jit.n_chunks(k), npar))
        _jit.risk_shared_negatives(fam, theta, p, d, m, s.negatives, wphi, wnorm, wt, uphi, lse, inv_tau,
                                   self.weights, gneg)
        return losses, (np.sum(gparts, axis=0) + np.sum(gneg, axis=0)) / n


def _scores(phi: Embedding, sample: TrainingSample, tau: float):
    """NumPy: scores (n, k + 1) with the positive in column 0, and the embedded points."""
    n, k, p = sample.n, sample.k, sample.p
    u, v = phi(sample.x), phi(sample.x_pos)
    w = phi(sample.negatives.reshape(-1, p))
    s0 = np.sum(u * v, axis=1) / tau
    if sample.shared:
        s = u @ w.T / tau  # (n, k)
    else:
        w = w.reshape(n, k, -1)
        s = np.einsum("nd,nkd->nk", u, w) / tau
    return np.column_stack([s0, s]), u, v, w


def _reference_value_and_grad(phi: Embedding, sample: TrainingSample, tau: float,
                              weights: NDArray | None = None) -> tuple[NDArray, NDArray]:
    """Pure-NumPy reference of :meth:`EmpiricalRisk.value_and_grad`: (per-tuple losses, gradient)."""
    n, k, p = sample.n, sample.k, sample.p
    wt = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    scores, u, v, w = _scores(phi, sample, tau)
    lse = logsumexp(scores, axis=1)
    losses = lse - scores[:, 0]
    prob = np.exp(scores - lse[:, None])
    pn = prob[:, 1:] * wt[:, None]
    a0 = -prob[:, 1:].sum(axis=1) * wt  # w_i (p_0 - 1)
    if sample.shared:
        g_u = (a0[:, None] * v + pn @ w) / (tau * n)
        g_w = pn.T @ u / (tau * n)
    else:
        g_u = (a0[:, None] * v + np.einsum("nk,nkd->nd", pn, w)) / (tau * n)
        g_w = (pn[:, :, None] * u[:, None, :]).reshape(n * k, -1) / (tau * n)
    g_v = a0[:, None] * u / (tau * n)
    grad = (phi.vjp(sample.x, g_u) + phi.vjp(sample.x_pos, g_v)
            + phi.vjp(sample.negatives.reshape(-1, p), g_w))
    return losses, grad


# ----------------------------------------------------------------------------------------------
# the trainer

@dataclass(frozen=True)
class ConvergenceReport:
    """How one optimisation run ended (scipy L-BFGS-B).

    Attributes
    ----------
    converged : bool
        scipy's success flag: the projected-gradient (``gtol``) or relative-reduction (``ftol``)
        criterion was met before ``maxiter``.
    iterations, n_evaluations : int
        L-BFGS-B iterations and risk-and-gradient evaluations.
    value : float
        Final empirical risk (nats).
    start_value : float
        Empirical risk at the initialisation.
    grad_norm : float
        Largest absolute component of the final gradient (the quantity ``gtol`` bounds).
    message : str
        scipy's message.
    restart : int
        Index of the start (0 = the given initialisation).
    seconds : float
        Wall time (not part of the result's reproducibility).
    """

    converged: bool
    iterations: int
    n_evaluations: int
    value: float
    start_value: float
    grad_norm: float
    message: str
    restart: int
    seconds: float


@dataclass(frozen=True)
class TrainResult:
    """Best embedding over the starts, its report, and every start's embedding and report."""

    embedding: Embedding
    report: ConvergenceReport
    candidates: tuple[Embedding, ...]
    reports: tuple[ConvergenceReport, ...]

    @property
    def converged(self) -> bool:
        return self.report.converged


def train(risk: EmpiricalRisk, init: Embedding, *, restarts: int = 1, rng=None, maxiter: int = 2000,
          gtol: float = 1e-9, ftol: float = 1e-13, maxcor: int = 20) -> TrainResult:
    """Minimise the empirical risk over the family of ``init`` with L-BFGS-B (deterministic).

    Parameters
    ----------
    risk : EmpiricalRisk
        The objective ``R_hat_{n,k}``.
    init : Embedding
        Start of the first run; it also fixes the family and shapes. Seed it yourself, e.g.
        ``LinearEmbedding.random(p, d, rng=seed)``.
    restarts : int, default 1
        Number of runs; runs 1.. start from ``init.random_like(rng=...)`` with generators spawned
        from ``rng`` (one per run, so a run's start does not depend on the others).
    rng : optional
        Seed or Generator for the extra starts (SPEC 7); unused when ``restarts == 1``.
    maxiter : int, default 2000
        Iteration limit per run.
    gtol : float, default 1e-9
        Stop when every component of the (projected) gradient is <= gtol.
    ftol : float, default 1e-13
        Stop when ``(f_k - f_{k+1}) / max(|f_k|, |f_{k+1}|, 1) <= ftol``.
    maxcor : int, default 20
        L-BFGS memory.

    Returns
    -------
    TrainResult
        The run with the smallest final risk (the first on ties), with all runs' reports.

    Notes
    -----
    Same inputs, same seed: bit-identical parameters (the risk and gradient are reproducible for
    any thread count, and L-BFGS-B is deterministic). Scale invariance of phi = h/|h| makes the
    risk flat along the last linear layer's scale; L-BFGS-B is unaffected. If an iterate reaches
    parameters where phi is undefined on a training point, ``ValueError`` propagates.
    """
    if not isinstance(risk, EmpiricalRisk):
        raise ValueError(f"'risk' must be an EmpiricalRisk, got {type(risk).__name__}")
    init = _check_embedding(init, risk.sample.p)
    restarts = check_int("restarts", restarts, low=1)
    maxiter = check_int("maxiter", maxiter, low=1)
    gtol = check_scalar("gtol", gtol, low=0.0)
    ftol = check_scalar("ftol", ftol, low=0.0)
    maxcor = check_int("maxcor", maxcor, low=1)
    starts = [init]
    if restarts > 1:
        children = check_rng(rng).spawn(restarts - 1)
        starts += [init.random_like(rng=c) for c in children]
    fun = risk.objective(init)
    results = []
    # L-BFGS-B's vector operations are tiny: threaded BLAS only adds overhead (measured: 6x slower
    # training on the shared 2-core machine), so BLAS runs single-threaded here
    with single_threaded_blas():
        for r, start in enumerate(starts):
            results.append(_run_once(fun, init, start, r, maxiter=maxiter, gtol=gtol, ftol=ftol, maxcor=maxcor))
    best = min(range(len(results)), key=lambda i: (results[i][1].value, i))
    return TrainResult(embedding=results[best][0], report=results[best][1],
                       candidates=tuple(e for e, _ in results), reports=tuple(r for _, r in results))


def _run_once(fun, init: Embedding, start: Embedding, restart: int, *, maxiter: int, gtol: float, ftol: float,
              maxcor: int) -> tuple[Embedding, ConvergenceReport]:
    """One L-BFGS-B run from ``start``."""
    t0 = time.perf_counter()
    theta0 = np.array(start.params, dtype=float)
    f0, _ = fun(theta0)
    res = optimize.minimize(fun, theta0, jac=True, method="L-BFGS-B",
                            options={"maxiter": maxiter, "gtol": gtol, "ftol": ftol, "maxcor": maxcor})
    emb = init.with_params(res.x)
    rep = ConvergenceReport(converged=bool(res.success), iterations=int(res.nit), n_evaluations=int(res.nfev),
                            value=float(res.fun), start_value=float(f0), grad_norm=float(np.max(np.abs(res.jac))),
                            message=str(res.message), restart=restart, seconds=time.perf_counter() - t0)
    return emb, rep


def checkpoints(risk: EmpiricalRisk, init: Embedding, maxiters) -> list[tuple[Embedding, int]]:
    """The embedding along training: for each iteration limit c of ``maxiters`` (0 = ``init`` itself),
    ``(embedding, iterations made)`` of :func:`train` from ``init`` with ``maxiter=c``. Each checkpoint is
    its own deterministic run from the same start, so it equals that run stopped after c iterations."""
    out = []
    for c in maxiters:
        if c == 0:
            out.append((init, 0))
        else:
            res = train(risk, init, maxiter=c)
            out.append((res.embedding, res.report.iterations))
    return out
