"""A trainable embedding into S^{d-1} whose parameter count and Lipschitz constant do not depend on d (claim C6).

Claim C6 (docs/theory.md section 3) says that the generalisation bounds carry no explicit dependence on
the embedding dimension d: they depend on the class through its parameter count and its Lipschitz
constant in the parameters (and on tau, n, k). Testing it needs a family in which those stay
*exactly* the same while d changes the problem: a linear lift by a fixed isometry changes no score
(a vacuous test), and a nonlinear lift such as ``normalize(tanh(A_d W x + c_d))`` also changes its
Lipschitz constant (docs/design.md, "simkit.embeddings.lifted").

:class:`FourierEmbedding` is a random-Fourier-feature lift that is an *isometric immersion* in the
parameters' image::

    phi_W(x) = ( cos(A W x), sin(A W x) ) / sqrt(m),   d = 2 m,

with trainable ``W`` in R^{3 x p} (9 parameters for p = 3, as the linear family) and a fixed tight
frame ``A`` in R^{m x 3}: then ``|phi_W(x)| = 1`` exactly and the Lipschitz constant in the parameters
is ``1/sqrt(3)`` for every d, W and x (:meth:`FourierEmbedding.param_lipschitz`), while the score
kernel ``K_d(W(x - y))`` changes with d (d >= 6, even). :meth:`FourierEmbedding.frame` builds the
nested frames of ``studies/generalisation.py``. The family is NumPy only (no jitted routine):
:class:`LiftedRisk` computes its empirical risk and gradient in O(d) per point. The derivation and the
frame's construction: docs/design.md, "simkit.embeddings.lifted".
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from simkit._checks import check_int, check_rng
from simkit.embeddings.embedding import Embedding, _check_matrix
from simkit.embeddings.training import EmpiricalRisk, TrainingSample

__all__ = ["FourierEmbedding", "LiftedRisk", "lifted_value_and_grad", "LIFT_SEED"]

#: seed of the fixed frame of :meth:`FourierEmbedding.frame` (recorded in datasets)
LIFT_SEED = 20260312
#: family code: no jitted routine exists for this family (simkit.embeddings.embedding uses 0 and 1)
FAMILY_FOURIER = -1


class FourierEmbedding(Embedding):
    """``phi_W(x) = (cos(A W x), sin(A W x)) / sqrt(m)`` on S^{2m-1}: trainable W, fixed frequencies A.

    Parameters
    ----------
    W : array_like, shape (r, p)
        Trainable; p >= 2, r >= 1.
    A : array_like, shape (m, r)
        Fixed frequencies (rows), m >= 1; d = 2 m.

    Attributes
    ----------
    W, A : ndarray
        Read-only copies.
    p, d, m, rank : int
    params : ndarray, shape (r p,)
        ``W.ravel()``; only W is trainable.

    Notes
    -----
    ``|phi(x)| = 1`` identically. Output coordinates: the m cosines, then the m sines. The jitted
    routines of :mod:`simkit.embeddings.training` do not know this family: use :class:`LiftedRisk`.
    """

    family = FAMILY_FOURIER

    def __init__(self, W: ArrayLike, A: ArrayLike):
        w = _check_matrix("W", W)
        r, p = w.shape
        if p < 2 or r < 1:
            raise ValueError(f"'W' must have shape (r, p) with r >= 1 and p >= 2 (input sphere S^(p-1)), got {w.shape}")
        a = _check_matrix("A", A, (None, r))
        if a.shape[0] < 1:
            raise ValueError(f"'A' must have at least one row (one frequency), got shape {a.shape}")
        self._set(w, a)

    def _set(self, w, a):
        self.W, self.A = w, a
        self.rank, self.p = w.shape
        self.m = a.shape[0]
        self.d = 2 * self.m
        self.params = w.reshape(-1).copy()
        self._freeze()

    def __repr__(self):
        return f"FourierEmbedding(p={self.p}, rank={self.rank}, d={self.d})"

    @classmethod
    def frame(cls, p: int, d: int, *, W: ArrayLike | None = None, seed: int = LIFT_SEED) -> FourierEmbedding:
        """The nested tight frame of docs/design.md: d = 2m even, m >= r = p (``A^T A = (m/p) I``).

        ``W`` defaults to ``I_p``. The frame's rows come from ``default_rng([seed, 0])`` row by row,
        so the design at d is built from the first d/2 rows of the design at any larger d.
        """
        p = check_int("p", p, low=2)
        d = check_int("d", d, low=2 * p)
        if d % 2:
            raise ValueError(f"'d' must be even (d = 2m: a cosine and a sine per frequency), got {d}")
        seed = check_int("seed", seed, low=0)
        m = d // 2
        g = np.random.default_rng([seed, 0]).standard_normal((m, p))
        ev, u = np.linalg.eigh(g.T @ g)
        a = g @ (u * ev ** -0.5) @ u.T * np.sqrt(m / p)
        return cls(np.eye(p) if W is None else W, a)

    def with_params(self, theta: ArrayLike) -> FourierEmbedding:
        th = _check_matrix("theta", theta, ndim=1)
        if th.size != self.W.size:
            raise ValueError(f"'theta' must have length {self.W.size} (the number of parameters), got {th.size}")
        return type(self)(th.reshape(self.W.shape), self.A)

    def random_like(self, *, rng=None) -> FourierEmbedding:
        """W with i.i.d. N(0, 1) entries (|W x| ~ sqrt(r): frequencies of order one), same frame."""
        rng = check_rng(rng)
        return type(self)(rng.standard_normal(self.W.shape), self.A)

    def _unchecked(self, theta):
        new = object.__new__(type(self))
        new._set(np.array(theta, dtype=float).reshape(self.W.shape), self.A)
        return new

    def param_lipschitz(self) -> float:
        """``sup_{x, W} ||d phi_W(x) / d W||_2 = sqrt(lambda_max(A^T A) / m)`` (|x| = 1).

        ``d phi = J dW x`` with ``J^T J = A^T A / m`` at every point: the norm is attained at every
        x for the worst dW, and equals ``1/sqrt(p)`` for the tight frame of :meth:`frame`.
        """
        return float(np.sqrt(np.linalg.eigvalsh(self.A.T @ self.A)[-1] / self.m))

    def kernel(self, v: ArrayLike) -> NDArray[np.float64]:
        """``K(v) = (1/m) sum_j cos(a_j . v)`` for ``v`` of shape (..., r): ``phi(x).phi(y) = K(W(x - y))``."""
        v = np.asarray(v, dtype=float)
        return np.mean(np.cos(v @ self.A.T), axis=-1)

    def _h_bound(self) -> float:
        return 1.0

    def _hidden(self, x):
        th = (x @ self.W.T) @ self.A.T
        c, s = np.cos(th), np.sin(th)
        h = np.concatenate([c, s], axis=1)
        h /= np.sqrt(self.m)  # in place: the arithmetic of (c, s) / sqrt(m) without a second array
        return h, (c, s)

    def _backward(self, x, cache, g_h):
        c, s = cache
        m = self.m
        g_th = g_h[:, m:] * c  # (g_h[:, m:] c - g_h[:, :m] s) / sqrt(m), in place
        g_th -= g_h[:, :m] * s
        g_th /= np.sqrt(m)
        return ((g_th @ self.A).T @ x).reshape(-1)

    def _jit_args(self):
        raise NotImplementedError("FourierEmbedding has no jitted routine: evaluate its risk with "
                                  "simkit.embeddings.lifted.LiftedRisk instead of EmpiricalRisk")


def lifted_value_and_grad(phi: Embedding, sample: TrainingSample, tau: float, weights: NDArray | None = None,
                          want_grad: bool = True) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """Per-tuple InfoNCE losses and the gradient of ``(1/n) sum_i w_i l_i`` in NumPy, one forward pass.

    The gradient of :mod:`simkit.embeddings.training` (docs/design.md) with every point embedded once; any
    embedding with ``_hidden``/``_normalise``/``_backward`` works (independent or shared
    negatives). Cost O(n k d).
    """
    n, k, p = sample.n, sample.k, sample.p
    wt = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    pts = np.concatenate([sample.x, sample.x_pos, sample.negatives.reshape(-1, p)])
    h, cache = phi._hidden(pts)  # a new array (no family keeps it in its cache): normalised in place below
    norm = phi._norm(h)  # raises where phi is undefined
    f = h
    f /= norm  # h / |h|: the arithmetic of phi._normalise, h itself is not needed again
    u, v, w = f[:n], f[n:2 * n], f[2 * n:]
    s0 = np.sum(u * v, axis=1) / tau
    sj = u @ w.T / tau if sample.shared else np.einsum("nd,nkd->nk", u, w.reshape(n, k, -1)) / tau
    scores = np.column_stack([s0, sj])
    lse = logsumexp(scores, axis=1)
    losses = lse - s0
    if not want_grad:
        return losses, None
    prob = np.exp(scores - lse[:, None])
    pn = prob[:, 1:] * wt[:, None]
    a0 = -prob[:, 1:].sum(axis=1) * wt
    scale = 1.0 / (tau * n)
    # g = (dl/du, dl/dv, dl/dw) stacked like pts, each block written in place (same products, no copies)
    g = np.empty(f.shape)
    g_u, g_v, g_w = g[:n], g[n:2 * n], g[2 * n:]
    if sample.shared:
        np.multiply(a0[:, None] * v + pn @ w, scale, out=g_u)
        np.multiply(pn.T @ u, scale, out=g_w)
    else:
        np.multiply(a0[:, None] * v + np.einsum("nk,nkd->nd", pn, w.reshape(n, k, -1)), scale, out=g_u)
        np.multiply(pn[:, :, None], u[:, None, :], out=g_w.reshape(n, k, -1))
        g_w *= scale
    np.multiply(a0[:, None] * u, scale, out=g_v)
    # g_h = (g - (f.g) f) / |h|: the tangential part, back through the normalisation, in place
    fg = f * g
    np.multiply(np.sum(fg, axis=1, keepdims=True), f, out=fg)
    g -= fg
    g /= norm
    return losses, phi._backward(pts, cache, g)


class LiftedRisk(EmpiricalRisk):
    """:class:`~simkit.embeddings.training.EmpiricalRisk` whose value and gradient for a :class:`FourierEmbedding`
    come from :func:`lifted_value_and_grad` (NumPy); other families use the jitted routines. Works
    with :func:`simkit.embeddings.training.train` unchanged."""

    def _run(self, phi, want_grad):
        if not isinstance(phi, FourierEmbedding):
            return super()._run(phi, want_grad)
        return lifted_value_and_grad(phi, self.sample, self.tau, self.weights if self.weighted else None, want_grad)
