"""Trainable embeddings phi_theta: S^{p-1} -> S^{d-1} (docs/theory.md section 1, claims C3--C6).

Two parametric families, each Lipschitz in its parameters on the domain stated below:

* :class:`LinearEmbedding` -- ``phi_W(x) = W x / ||W x||`` with ``W`` in R^{d x p}, d >= p, of full
  column rank. ``W = I`` is the identity embedding (phi(x).phi(y) = x.y), for which
  :mod:`simkit.exact` has closed forms; ``W`` proportional to an orthogonal matrix gives the same
  scores.
* :class:`TwoLayerEmbedding` -- ``phi(x) = normalize(W2 tanh(W1 x + b1))`` with hidden width m:
  ``W1`` (m, p), ``b1`` (m,), ``W2`` (d, m). The activation is ``tanh``: smooth, bounded and
  1-Lipschitz, so ``h(x) = W2 tanh(W1 x + b1)`` is Lipschitz in (x, theta) uniformly on the sphere
  and ``|h| <= ||W2||_2 sqrt(m)``.

Objects are frozen (scipy.stats style): parameters are validated once and stored read-only
(:meth:`Embedding.with_params` makes a new object). Every embedding has a flat parameter vector
``params``, ``from_vector`` and random initialisation (``random``, ``random_like``; keyword ``rng``, SPEC 7).

Domain. ``phi = h / ||h||`` is undefined, and not Lipschitz near, where ``h(x) = 0``. The linear
family is safe on the whole sphere when W has full column rank (checked; Lipschitz constant
``sigma_max / sigma_min``); the two-layer family checks ``||h(x)|| > NORM_FLOOR * bound`` at every
evaluation and raises ``ValueError`` naming ``x`` otherwise.

Points are on the last axis: ``phi(x)`` takes ``(n, p)`` or ``(p,)`` and returns ``(n, d)`` or
``(d,)``. The NumPy methods here (``__call__``, :meth:`Embedding.vjp`) are the reference for the
jitted forward and backward passes in :mod:`simkit._jit.training`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from simkit._checks import Frozen, check_int, check_points, check_rng

__all__ = ["Embedding", "LinearEmbedding", "TwoLayerEmbedding", "NORM_FLOOR", "COND_MAX", "FAMILIES", "family_embedding",
           "padded_params"]

#: ``||h(x)||`` at or below this fraction of its a-priori bound counts as ``h(x) = 0`` (phi undefined)
NORM_FLOOR = 1e-12
#: largest accepted condition number sigma_max / sigma_min of a LinearEmbedding's W
COND_MAX = 1e12

# family codes of the jitted routines (simkit._jit.training)
FAMILY_LINEAR = 0
FAMILY_TWO_LAYER = 1


def _check_matrix(name: str, a: ArrayLike, shape: tuple[int | None, ...] | None = None,
                  ndim: int = 2) -> NDArray[np.float64]:
    try:
        raw = np.asarray(a)
        if raw.dtype.kind not in "iuf":
            raise TypeError
        arr = raw.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must be an array of real numbers, got {type(a).__name__}") from None
    if arr.ndim != ndim:
        raise ValueError(f"'{name}' must be a {ndim}-D array, got shape {arr.shape}")
    if shape is not None and any(s is not None and s != t for s, t in zip(shape, arr.shape)):
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        raise ValueError(f"'{name}' must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    return arr.copy()


def _check_vector(name: str, theta: ArrayLike, size: int) -> NDArray[np.float64]:
    arr = _check_matrix(name, theta, ndim=1)
    if arr.size != size:
        raise ValueError(f"'{name}' must have length {size} (the number of parameters), got {arr.size}")
    return arr


class Embedding(Frozen):
    """Base class: a frozen, parametric map phi_theta: S^{p-1} -> S^{d-1}.

    Subclasses set ``p``, ``d``, ``params`` (flat, read-only) and implement ``_hidden(x)``
    (the raw output h(x) before normalisation, and a cache for the backward pass), ``_h_bound``
    and ``_backward(x, cache, g_h)``.
    """

    p: int
    d: int
    params: NDArray[np.float64]
    family: ClassVar[int]

    _immutable_hint = "use with_params() for new parameters"

    # -- parameters ------------------------------------------------------------------------------

    @property
    def n_params(self) -> int:
        """Length of the flat parameter vector."""
        return int(self.params.size)

    @property
    def hidden(self) -> int:
        """Hidden width m (0 for the linear family); with p, d it fixes the parameter layout."""
        return 0

    def with_params(self, theta: ArrayLike) -> Embedding:
        """The same family and shapes with the flat parameter vector ``theta`` (validated)."""
        raise NotImplementedError

    def random_like(self, *, rng=None) -> Embedding:
        """Random parameters for the same family and shapes (the family's initialisation)."""
        raise NotImplementedError

    def _unchecked(self, theta: NDArray) -> Embedding:
        """Same family and shapes with ``theta``; no validation (trainer inner loop)."""
        raise NotImplementedError

    # -- evaluation ------------------------------------------------------------------------------

    def __call__(self, x: ArrayLike) -> NDArray[np.float64]:
        """phi(x) for points ``x`` of shape ``(n, p)`` or ``(p,)``: unit vectors ``(n, d)`` or ``(d,)``.

        Raises
        ------
        ValueError
            If ``x`` is not an array of unit vectors in R^p, or phi is undefined at a point of
            ``x`` (``h(x) = 0``, see the module notes).
        """
        x = self._check_x(x)
        flat = x.reshape(-1, self.p)
        h, _ = self._hidden(flat)
        out = self._normalise(h)
        return out.reshape(*x.shape[:-1], self.d)

    def _embed_unchecked(self, x: NDArray) -> NDArray[np.float64]:
        """phi on validated points ``(N, p)`` (quadrature nodes): skips the input checks, keeps the
        domain guard."""
        h, _ = self._hidden(x)
        return self._normalise(h)

    def raw(self, x: ArrayLike) -> NDArray[np.float64]:
        """The unnormalised output ``h(x)``, shape ``(n, d)`` (no domain check)."""
        x = self._check_x(x)
        h, _ = self._hidden(x.reshape(-1, self.p))
        return h.reshape(*x.shape[:-1], self.d)

    def vjp(self, x: ArrayLike, g: ArrayLike) -> NDArray[np.float64]:
        """Vector-Jacobian product ``sum_i (d phi(x_i) / d theta)^T g_i``, shape ``(n_params,)``.

        Parameters
        ----------
        x : array_like, shape (n, p)
            Points.
        g : array_like, shape (n, d)
            Upstream gradients with respect to phi(x_i).

        Notes
        -----
        With ``phi = h/|h|``: ``d phi = (I - phi phi^T) dh / |h|``, so the gradient with respect to
        h is ``g_h = (g - (phi.g) phi) / |h|``, then back through h (see each family). This NumPy
        routine is the reference for the jitted backward pass.
        """
        x = self._check_x(x)
        if x.ndim != 2:
            raise ValueError(f"'x' must have shape (n, {self.p}), got {x.shape}")
        g = _check_matrix("g", g, (x.shape[0], self.d))
        h, cache = self._hidden(x)
        phi = self._normalise(h)
        norm = np.sqrt(np.sum(h * h, axis=1, keepdims=True))
        g_h = (g - np.sum(phi * g, axis=1, keepdims=True) * phi) / norm
        return self._backward(x, cache, g_h)

    def lipschitz_input_bound(self) -> float:
        """An upper bound of the Lipschitz constant of phi on S^{p-1} (inf if not available)."""
        return float("inf")

    # -- internals -------------------------------------------------------------------------------

    def _check_x(self, x) -> NDArray:
        x = check_points("x", x, self.p)
        if x.ndim > 2:
            raise ValueError(f"'x' must have shape (n, {self.p}) or ({self.p},), got {x.shape}")
        return x

    def _h_bound(self) -> float:  # pragma: no cover
        raise NotImplementedError

    def _hidden(self, x: NDArray):  # pragma: no cover
        raise NotImplementedError

    def _backward(self, x: NDArray, cache, g_h: NDArray) -> NDArray:  # pragma: no cover
        raise NotImplementedError

    def _normalise(self, h: NDArray) -> NDArray:
        return h / self._norm(h)

    def _norm(self, h: NDArray) -> NDArray:
        """``|h|`` per row (keepdims), after the domain guard of :meth:`_normalise` (raises where h vanishes)."""
        norm = np.sqrt(np.sum(h * h, axis=-1, keepdims=True))
        floor = NORM_FLOOR * self._h_bound()
        if norm.size and np.min(norm) <= floor:
            i = int(np.argmin(norm))
            raise ValueError(
                f"'x' contains a point (row {i}) where the embedding's raw output h(x) vanishes "
                f"(|h| = {float(norm.flat[i]):.3g} <= {NORM_FLOOR:g} x its bound {self._h_bound():.3g}); "
                f"phi = h/|h| is undefined there. Perturb the parameters or the point")
        return norm

    # the jitted routines take (family, theta, p, d, m)
    def _jit_args(self) -> tuple[int, NDArray, int, int, int, float]:
        return (self.family, np.ascontiguousarray(self.params), self.p, self.d, self.hidden,
                NORM_FLOOR * self._h_bound())


class LinearEmbedding(Embedding):
    """``phi_W(x) = W x / ||W x||``, a linear map followed by projection onto S^{d-1}.

    Parameters
    ----------
    W : array_like, shape (d, p)
        Full column rank (condition number ``sigma_max / sigma_min <= 1e12``), so d >= p >= 2 and
        ``W x != 0`` on the whole sphere.

    Attributes
    ----------
    W : ndarray, shape (d, p)
        Read-only copy.
    p, d : int
        Input and output dimensions.
    params : ndarray, shape (d * p,)
        ``W.ravel()`` (row-major).

    Notes
    -----
    Scale invariance: ``phi_{cW} = phi_W`` for c > 0, so the risk is flat along ``W`` and its
    gradient is orthogonal to ``W`` (Frobenius). ``phi_W(x).phi_W(y) = x.y`` for all x, y iff W is
    a multiple of an orthogonal (d = p) or isometric (d > p) matrix. The Lipschitz constant on the
    sphere is at most ``sigma_max / sigma_min`` (:meth:`lipschitz_input_bound`).

    Raises
    ------
    ValueError
        If ``W`` is not a finite 2-D array with d >= p >= 2 of full column rank.
    """

    family = FAMILY_LINEAR

    def __init__(self, W: ArrayLike):
        w = _check_matrix("W", W)
        d, p = w.shape
        if p < 2:
            raise ValueError(f"'W' must have at least 2 columns (the input sphere S^(p-1), p >= 2), "
                             f"got shape {w.shape}")
        if d < p:
            raise ValueError(f"'W' must have at least as many rows as columns (d >= p), got shape {w.shape}: a linear "
                             f"map R^{p} -> R^{d} vanishes on a great subsphere, where phi_W is undefined; use "
                             f"TwoLayerEmbedding for d < p")
        sv = np.linalg.svd(w, compute_uv=False)
        if not sv[-1] > sv[0] / COND_MAX:
            raise ValueError(f"'W' must have full column rank (condition number <= {COND_MAX:g}), got singular "
                             f"values {sv[0]:.3g} ... {sv[-1]:.3g}: phi_W(x) = Wx/|Wx| is undefined where Wx = 0")
        self._set(w)

    def _set(self, w: NDArray) -> None:
        self.W = w
        self.d, self.p = w.shape
        self.params = w.reshape(-1).copy()
        self._freeze()

    def __repr__(self):
        return f"LinearEmbedding(p={self.p}, d={self.d})"

    @classmethod
    def identity(cls, p: int) -> LinearEmbedding:
        """``W = I_p``: phi(x) = x."""
        return cls(np.eye(check_int("p", p, low=2)))

    @classmethod
    def from_vector(cls, theta: ArrayLike, p: int, d: int) -> LinearEmbedding:
        """From a flat vector of length d*p (row-major W)."""
        p = check_int("p", p, low=2)
        d = check_int("d", d, low=p)
        return cls(_check_vector("theta", theta, d * p).reshape(d, p))

    @classmethod
    def random(cls, p: int, d: int, *, rng=None) -> LinearEmbedding:
        """``W`` with i.i.d. N(0, 1/p) entries (full column rank with probability one)."""
        p = check_int("p", p, low=2)
        d = check_int("d", d, low=p)
        rng = check_rng(rng)
        return cls(rng.standard_normal((d, p)) / np.sqrt(p))

    def with_params(self, theta: ArrayLike) -> LinearEmbedding:
        return type(self).from_vector(theta, self.p, self.d)

    def random_like(self, *, rng=None) -> LinearEmbedding:
        return type(self).random(self.p, self.d, rng=rng)

    def _unchecked(self, theta):
        new = object.__new__(type(self))
        new._set(np.array(theta, dtype=float).reshape(self.d, self.p))
        return new

    def lipschitz_input_bound(self) -> float:
        sv = np.linalg.svd(self.W, compute_uv=False)
        return float(sv[0] / sv[-1])

    def _h_bound(self) -> float:
        return float(np.sqrt(np.sum(self.W * self.W)))  # ||W||_F >= sigma_max >= |Wx|

    def _hidden(self, x):
        return x @ self.W.T, None

    def _backward(self, x, cache, g_h):
        return (g_h.T @ x).reshape(-1)  # d/dW of sum_i g_h,i . W x_i


class TwoLayerEmbedding(Embedding):
    """``phi(x) = h(x) / ||h(x)||``, ``h(x) = W2 tanh(W1 x + b1)``: one hidden layer of width m.

    Parameters
    ----------
    W1 : array_like, shape (m, p)
    b1 : array_like, shape (m,)
    W2 : array_like, shape (d, m)
        Finite; p >= 2, d >= 2, m >= 1. Any d (also d < p).

    Attributes
    ----------
    W1, b1, W2 : ndarray
        Read-only copies.
    p, d, hidden : int
        Input, output and hidden dimensions.
    params : ndarray, shape (m p + m + d m,)
        ``concatenate([W1.ravel(), b1, W2.ravel()])`` (row-major).

    Notes
    -----
    Activation ``tanh`` (smooth, odd, bounded by 1, derivative ``1 - tanh^2`` in (0, 1]). With b1 = 0
    phi is odd; the random initialisation draws b1 != 0. phi is undefined where ``h(x) = 0``;
    evaluations raise ``ValueError`` there (``|h| <= NORM_FLOOR * ||W2||_F sqrt(m)``). On a part of
    the sphere where ``|h| >= c > 0`` it is Lipschitz in x and in the parameters.
    """

    family = FAMILY_TWO_LAYER

    def __init__(self, W1: ArrayLike, b1: ArrayLike, W2: ArrayLike):
        w1 = _check_matrix("W1", W1)
        m, p = w1.shape
        if p < 2:
            raise ValueError(f"'W1' must have at least 2 columns (the input sphere S^(p-1), p >= 2), "
                             f"got shape {w1.shape}")
        if m < 1:
            raise ValueError(f"'W1' must have at least one row (the hidden width m >= 1), got shape {w1.shape}")
        b = _check_matrix("b1", b1, (m,), ndim=1)
        w2 = _check_matrix("W2", W2, (None, m))
        if w2.shape[0] < 2:
            raise ValueError(f"'W2' must have at least 2 rows (the output sphere S^(d-1), d >= 2), "
                             f"got shape {w2.shape}")
        if not np.any(w2):
            raise ValueError("'W2' must not be all zeros: h(x) = W2 tanh(W1 x + b1) would vanish everywhere")
        self._set(w1, b, w2)

    def _set(self, w1, b, w2):
        self.W1, self.b1, self.W2 = w1, b, w2
        self.p = w1.shape[1]
        self.d = w2.shape[0]
        self._m = w1.shape[0]
        self.params = np.concatenate([w1.reshape(-1), b, w2.reshape(-1)])
        self._freeze()

    def __repr__(self):
        return f"TwoLayerEmbedding(p={self.p}, hidden={self._m}, d={self.d}, activation=tanh)"

    @property
    def hidden(self) -> int:
        return self._m

    @staticmethod
    def n_params_for(p: int, d: int, hidden: int) -> int:
        """``m p + m + d m``."""
        return hidden * p + hidden + d * hidden

    @classmethod
    def _split(cls, theta, p, d, m):
        a, b = m * p, m * p + m
        return theta[:a].reshape(m, p), theta[a:b], theta[b:].reshape(d, m)

    @classmethod
    def from_vector(cls, theta: ArrayLike, p: int, d: int, hidden: int) -> TwoLayerEmbedding:
        """From a flat vector ``[W1.ravel(), b1, W2.ravel()]`` of length ``m p + m + d m``."""
        p = check_int("p", p, low=2)
        d = check_int("d", d, low=2)
        m = check_int("hidden", hidden, low=1)
        th = _check_vector("theta", theta, cls.n_params_for(p, d, m))
        return cls(*cls._split(th, p, d, m))

    @classmethod
    def random(cls, p: int, d: int, hidden: int, *, rng=None) -> TwoLayerEmbedding:
        """W1 and b1 with i.i.d. N(0, 1) entries (pre-activations ~ N(0, 2) on the sphere, so tanh
        works in its nonlinear range), W2 with i.i.d. N(0, 1/m) entries."""
        p = check_int("p", p, low=2)
        d = check_int("d", d, low=2)
        m = check_int("hidden", hidden, low=1)
        rng = check_rng(rng)
        w1 = rng.standard_normal((m, p))
        b1 = rng.standard_normal(m)
        w2 = rng.standard_normal((d, m)) / np.sqrt(m)
        return cls(w1, b1, w2)

    def with_params(self, theta: ArrayLike) -> TwoLayerEmbedding:
        return type(self).from_vector(theta, self.p, self.d, self._m)

    def random_like(self, *, rng=None) -> TwoLayerEmbedding:
        return type(self).random(self.p, self.d, self._m, rng=rng)

    def _unchecked(self, theta):
        new = object.__new__(type(self))
        th = np.array(theta, dtype=float)
        new._set(*(a.copy() for a in self._split(th, self.p, self.d, self._m)))
        return new

    def _h_bound(self) -> float:
        return float(np.sqrt(np.sum(self.W2 * self.W2) * self._m))  # |W2 t| <= ||W2||_F |t|, |t| <= sqrt(m)

    def _hidden(self, x):
        t = np.tanh(x @ self.W1.T + self.b1)
        return t @ self.W2.T, t

    def _backward(self, x, t, g_h):
        g_w2 = g_h.T @ t  # (d, m)
        g_a = (g_h @ self.W2) * (1.0 - t * t)  # through tanh
        g_w1 = g_a.T @ x
        g_b1 = g_a.sum(axis=0)
        return np.concatenate([g_w1.reshape(-1), g_b1, g_w2.reshape(-1)])


#: names of the parametric families of :func:`family_embedding`
FAMILIES = ("linear", "two_layer")


def family_embedding(family: str, p: int, d: int, hidden: int = 0, theta: ArrayLike | None = None, *,
                     rng=None) -> Embedding:
    """An embedding S^{p-1} -> S^{d-1} of ``family`` ("linear" or "two_layer" with ``hidden`` units): from the
    first ``n_params`` entries of ``theta`` (a longer vector, e.g. zero-padded by :func:`padded_params`, is
    cut), or a random start from ``rng`` when ``theta`` is None."""
    if family == "linear":
        return LinearEmbedding.random(p, d, rng=rng) if theta is None else \
            LinearEmbedding.from_vector(np.asarray(theta)[: p * d], p, d)
    if family == "two_layer":
        if theta is None:
            return TwoLayerEmbedding.random(p, d, hidden, rng=rng)
        return TwoLayerEmbedding.from_vector(np.asarray(theta)[: TwoLayerEmbedding.n_params_for(p, d, hidden)], p, d,
                                             hidden)
    raise ValueError(f"'family' must be one of {', '.join(FAMILIES)}, got {family!r}")


def padded_params(phi: Embedding, size: int) -> NDArray[np.float64]:
    """``phi.params`` zero-padded to length ``size`` (to store embeddings of different sizes in one array)."""
    if size < phi.n_params:
        raise ValueError(f"'size' must be >= n_params = {phi.n_params}, got {size}")
    out = np.zeros(size)
    out[: phi.n_params] = phi.params
    return out
