"""Argument validation shared by the public API.

Every check raises ``ValueError`` whose message names the argument, states the constraint and
shows the offending value, e.g. ``'kappa' must be >= 0, got -1.0``.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "check_dim",
    "check_scalar",
    "check_int",
    "check_points",
    "check_unit_vectors",
    "check_weights",
    "check_rng",
    "UNIT_TOL",
    "Frozen",
]

# Tolerance for "is a unit vector": generous enough for float32 round-trips, tight enough to catch
# unnormalised input.
UNIT_TOL = 1e-6


def _fmt(value) -> str:
    try:
        arr = np.asarray(value)
        if arr.ndim == 0:
            return repr(arr.item())
        return f"an array of shape {arr.shape}"
    except Exception:  # pragma: no cover - exotic objects
        return repr(value)


def check_scalar(name: str, value, *, low: float | None = None, high: float | None = None,
                 low_inclusive: bool = True, high_inclusive: bool = True) -> float:
    """A finite real number within the stated bounds, returned as ``float``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.ndarray, np.generic)):
        raise ValueError(f"'{name}' must be a real number, got {value!r}")
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"'{name}' must be a real number, got {value!r}")
    if arr.ndim != 0:
        raise ValueError(f"'{name}' must be a scalar, got an array of shape {arr.shape}")
    try:
        v = float(arr)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must be a real number, got {value!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"'{name}' must be finite, got {v!r}")
    if low is not None:
        if low_inclusive and v < low:
            raise ValueError(f"'{name}' must be >= {low}, got {v!r}")
        if not low_inclusive and v <= low:
            raise ValueError(f"'{name}' must be > {low}, got {v!r}")
    if high is not None:
        if high_inclusive and v > high:
            raise ValueError(f"'{name}' must be <= {high}, got {v!r}")
        if not high_inclusive and v >= high:
            raise ValueError(f"'{name}' must be < {high}, got {v!r}")
    return v


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (Python or NumPy, or an integral float) within the stated bounds."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    if isinstance(value, (numbers.Integral, np.integer)):
        v = int(value)
    elif isinstance(value, (numbers.Real, np.floating)) and np.isfinite(value) and float(value).is_integer():
        v = int(value)
    else:
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    if low is not None and v < low:
        raise ValueError(f"'{name}' must be >= {low}, got {v}")
    if high is not None and v > high:
        raise ValueError(f"'{name}' must be <= {high}, got {v}")
    return v


def check_dim(name: str, value) -> int:
    """A sphere dimension: the ambient dimension d of S^{d-1}, an integer >= 2."""
    return check_int(name, value, low=2)


def check_points(name: str, x: ArrayLike, dim: int | None = None, *, unit: bool = True,
                 min_ndim: int = 1) -> NDArray[np.float64]:
    """Points on the sphere, shape ``(..., d)``: finite, last axis ``d``, optionally unit norm."""
    try:
        raw = np.asarray(x)
        if raw.dtype.kind not in "iuf":
            raise TypeError
        arr = raw.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must be an array of real numbers, got {type(x).__name__}") from None
    if arr.ndim < min_ndim:
        raise ValueError(f"'{name}' must have at least {min_ndim} dimension(s) with points on the last axis, "
                         f"got shape {arr.shape}")
    if dim is not None and (arr.ndim == 0 or arr.shape[-1] != dim):
        raise ValueError(f"'{name}' must have last axis of length {dim} (points on S^{dim - 1}), "
                         f"got shape {arr.shape}")
    if arr.ndim >= 1 and arr.shape[-1] < 2:
        raise ValueError(f"'{name}' must have last axis of length >= 2, got shape {arr.shape}")
    if unit and arr.size:
        # the common case in one pass and no temporary of arr's size: every norm within UNIT_TOL of
        # 1 implies every entry finite and of size <= 2 (a NaN or inf norm fails the comparison);
        # otherwise the checks below, in their order, name what is wrong
        norms = np.sqrt(np.einsum("...i,...i->...", arr, arr))
        if np.all(np.abs(norms - 1.0) <= UNIT_TOL):
            return arr
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    if unit:
        if arr.size and np.max(np.abs(arr)) > 2.0:
            raise ValueError(f"'{name}' must contain unit vectors (norm 1 within {UNIT_TOL:g}), "
                             f"found an entry of size {np.max(np.abs(arr)):.6g}")
        norms = np.sqrt(np.sum(arr * arr, axis=-1))
        if arr.size and np.max(np.abs(norms - 1.0)) > UNIT_TOL:
            worst = float(norms.flat[np.argmax(np.abs(norms - 1.0))])
            raise ValueError(f"'{name}' must contain unit vectors (norm 1 within {UNIT_TOL:g}), "
                             f"found norm {worst:.6g}")
    return arr


def check_anchor_pairs(x: ArrayLike, x_pos: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Anchors ``x`` of shape ``(B, d)`` on the sphere and their positives ``x_pos`` of the same shape."""
    x = check_points("x", x, min_ndim=2)
    if x.ndim != 2:
        raise ValueError(f"'x' must have shape (B, d), got {x.shape}")
    x_pos = check_points("x_pos", x_pos, x.shape[1])
    if x_pos.shape != x.shape:
        raise ValueError(f"'x_pos' must have the shape of 'x' {x.shape}, got {x_pos.shape}")
    return x, x_pos


def check_point_set(name: str, y: ArrayLike, dim: int) -> NDArray[np.float64]:
    """A set of ``K`` points on S^{dim-1}, shape ``(K, dim)``."""
    y = check_points(name, y, dim)
    if y.ndim != 2:
        raise ValueError(f"'{name}' must have shape (K, d), got {y.shape}")
    return y


def check_unit_vectors(name: str, x: ArrayLike, dim: int | None = None) -> NDArray[np.float64]:
    """Unit vectors, shape ``(..., d)``; renormalised exactly after the tolerance check."""
    arr = check_points(name, x, dim, unit=True)
    return arr / np.sqrt(np.sum(arr * arr, axis=-1, keepdims=True))


def check_weights(name: str, w: ArrayLike, n: int | None = None) -> NDArray[np.float64]:
    """Mixture or atom weights: 1-D, finite, non-negative, summing to 1 (within 1e-9)."""
    try:
        raw = np.asarray(w)
        if raw.dtype.kind not in "iuf":
            raise TypeError
        arr = raw.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"'{name}' must be an array of real numbers, got {w!r}") from None
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"'{name}' must be a non-empty 1-D array, got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise ValueError(f"'{name}' must have length {n}, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"'{name}' must be >= 0, got minimum {arr.min()!r}")
    total = float(arr.sum())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"'{name}' must sum to 1, got sum {total!r}; normalise with w / w.sum()")
    return arr / total


def check_rng(rng) -> np.random.Generator:
    """Normalise ``rng`` once with :func:`numpy.random.default_rng` (SPEC 7)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (bool, np.bool_, float, complex, str, bytes)):
        raise ValueError(f"'rng' must be a numpy.random.Generator, a SeedSequence, an int seed or None, got {rng!r}")
    if isinstance(rng, np.random.RandomState):
        raise ValueError("'rng' must be a numpy.random.Generator, a SeedSequence, a seed or None; "
                         "legacy RandomState is not supported")
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"'rng' must be a numpy.random.Generator, a SeedSequence, an int seed or None, "
                         f"got {rng!r} ({exc})") from None


class Frozen:
    """Mixin for immutable parameter objects: attributes are fixed once ``_freeze()`` has run,
    and array attributes become read-only."""

    _immutable_hint = "create a new instance"

    def __setattr__(self, name, value):
        if getattr(self, "_frozen", False):
            raise AttributeError(f"{type(self).__name__} is immutable; {self._immutable_hint}")
        object.__setattr__(self, name, value)

    def _freeze(self):
        for v in vars(self).values():
            if isinstance(v, np.ndarray):
                v.flags.writeable = False
        object.__setattr__(self, "_frozen", True)
