"""Argument checks of :func:`simkit.diagnose`: arrays from NumPy, PyTorch or pandas, labels, positives.

Each check names the argument and states the constraint (``ValueError``), and nothing here imports
PyTorch or pandas: a tensor is read through ``.detach()``/``.cpu()`` when it has them and
``__array__``, a DataFrame or Series through ``to_numpy``.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import NDArray

__all__ = ["check_scalar", "check_int", "check_rng", "as_array", "check_real", "normalise", "check_labels", "check_positives", "check_views",
           "CONVENTIONS", "check_convention", "negatives_for"]

#: how the negatives (and positives) of an anchor are drawn; the first is the default
CONVENTIONS = ("exclude_anchor", "include_anchor", "exclude_same_label")
#: largest number of negatives the exact curve is computed for
K_CAP = 2**40


def check_scalar(name: str, value, *, low: float | None = None, low_inclusive: bool = True) -> float:
    """A finite real number (>= or > ``low``), as ``float``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.ndarray, np.generic)) \
            or np.asarray(value).dtype.kind not in "iuf" or np.ndim(value) != 0:
        raise ValueError(f"'{name}' must be a real number, got {value!r}")
    v = float(value)
    if not np.isfinite(v):
        raise ValueError(f"'{name}' must be finite, got {v!r}")
    if low is not None and (v < low if low_inclusive else v <= low):
        raise ValueError(f"'{name}' must be {'>=' if low_inclusive else '>'} {low}, got {v!r}")
    return v


def check_int(name: str, value, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (or an integral float) within the bounds."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.integer, np.floating)) \
            or not np.isfinite(value) or not float(value).is_integer():
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    v = int(value)
    if low is not None and v < low:
        raise ValueError(f"'{name}' must be >= {low}, got {v}")
    if high is not None and v > high:
        raise ValueError(f"'{name}' must be <= {high}, got {v}")
    return v


def check_rng(rng) -> np.random.Generator:
    """``np.random.default_rng(rng)`` (SPEC 7); a Generator is used as is."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (bool, np.bool_, float, complex, str, bytes, np.random.RandomState)):
        raise ValueError(f"'rng' must be a numpy.random.Generator, a SeedSequence, an int seed or None, got {rng!r}")
    try:
        return np.random.default_rng(rng)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"'rng' must be a numpy.random.Generator, a SeedSequence, an int seed or None, "
                         f"got {rng!r} ({exc})") from None


def as_array(name: str, x) -> np.ndarray:
    """A NumPy array of ``x``: a tensor is detached and moved to the CPU first, pandas via ``to_numpy``."""
    try:
        if hasattr(x, "detach") and callable(x.detach):  # torch.Tensor (requires_grad allowed)
            x = x.detach()
            if hasattr(x, "cpu"):
                x = x.cpu()
        if hasattr(x, "to_numpy") and callable(x.to_numpy):  # pandas DataFrame / Series
            x = x.to_numpy()
        return np.asarray(x)
    except Exception as exc:
        raise ValueError(f"'{name}' cannot be converted to a NumPy array ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())})") from None


def check_real(name: str, x, ndim: int) -> np.ndarray:
    arr = as_array(name, x)
    if arr.dtype == object:
        try:
            arr = arr.astype(float)
        except (TypeError, ValueError):
            raise ValueError(f"'{name}' must be an array of real numbers, got an object array "
                             f"holding non-numbers") from None
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"'{name}' must be an array of real numbers, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        raise ValueError(f"'{name}' must be a {ndim}-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"'{name}' must be finite (no NaN or inf)")
    return arr


def normalise(name: str, x: np.ndarray) -> NDArray[np.float64]:
    """Rows of ``x`` scaled to unit norm, as a new float64 array, without overflow for any finite
    scale: each row is first divided by its largest absolute entry."""
    out = np.array(x, dtype=np.float64)
    amax = np.maximum(out.max(axis=-1), -out.min(axis=-1))  # max |x| without an (N, d) temporary
    if np.any(amax == 0):
        where = np.argwhere(amax == 0)[0]
        raise ValueError(f"'{name}' must have no zero rows (a zero row has no direction), "
                         f"found one at index {tuple(int(i) for i in where)}")
    out /= amax[..., None]
    out /= np.sqrt(np.einsum("...d,...d->...", out, out))[..., None]
    return out


def check_labels(labels, n: int) -> tuple[NDArray[np.intp], NDArray, str]:
    """Codes 0..C-1, the distinct labels, and a note (non-empty when float labels were converted)."""
    arr = as_array("labels", labels)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"'labels' must have shape ({n},) (one label per row of 'embeddings'), got shape {arr.shape}")
    note = ""
    if arr.dtype == object:
        kinds = {type(v) for v in arr.tolist()}
        if kinds and all(issubclass(t, str) for t in kinds):
            arr = arr.astype(str)
        elif kinds and all(issubclass(t, (int, np.integer)) and not issubclass(t, bool) for t in kinds):
            arr = arr.astype(np.int64)
        else:
            names = ", ".join(sorted(t.__name__ for t in kinds))
            raise ValueError(f"'labels' must be integers or strings, got an object array holding {names}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            bad = arr[~np.isfinite(arr) | (arr != np.round(arr))][0]
            raise ValueError(f"'labels' must be integers or strings (float labels only when every value is "
                             f"integral), got {bad!r}: a continuous target is not a class label")
        note = "float labels with integral values, used as classes"
    elif arr.dtype.kind not in "iuUSb":
        raise ValueError(f"'labels' must be integers or strings, got dtype {arr.dtype}")
    uniq, inverse = np.unique(arr, return_inverse=True)
    return inverse.reshape(-1).astype(np.intp), uniq, note


def check_positives(positives, n: int) -> NDArray[np.intp]:
    arr = as_array("positives", positives)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise ValueError(f"'positives' must be an integer array of row indices, got dtype {arr.dtype}")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] != n or arr.shape[1] < 1:
        raise ValueError(f"'positives' must have shape ({n}, m) with m >= 1, got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= n):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"'positives' must hold row indices in [0, {n - 1}], got {int(bad)}")
    return arr.astype(np.intp)


def check_views(views, n: int, d: int) -> NDArray[np.float64]:
    v = check_real("positive_embeddings", views, 3)
    if v.shape[0] != n or v.shape[1] < 1 or v.shape[2] != d:
        raise ValueError(f"'positive_embeddings' must have shape ({n}, m, {d}) with m >= 1, got shape {v.shape}")
    return normalise("positive_embeddings", v)


def check_convention(convention) -> str:
    c = str(convention).replace("-", "_")
    if c not in CONVENTIONS:
        raise ValueError(f"'convention' must be one of {', '.join(CONVENTIONS)}, got {convention!r}")
    return c


def _int(name: str, value, low: int, high: int = K_CAP) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating)):
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    if not np.isfinite(value) or value != int(value):
        raise ValueError(f"'{name}' must be an integer, got {value!r}")
    v = int(value)
    if v < low or v > high:
        raise ValueError(f"'{name}' must be in [{low}, {high}], got {v}")
    return v


def negatives_for(*, k=None, batch_size=None, symmetric: bool = False, queue=None) -> tuple[int | None, str]:
    """The number of negatives k of a training set-up, and how it was obtained.

    ``k`` as given; ``batch_size`` B: k = B - 1 (CLIP-style, one direction), k = 2B - 2 with
    ``symmetric`` (SimCLR's NT-Xent: both views of the other B - 1 pairs); ``queue`` K (MoCo): k = K.
    At most one of the three may be given.
    """
    given = [name for name, v in (("k", k), ("batch_size", batch_size), ("queue", queue)) if v is not None]
    if len(given) > 1:
        raise ValueError(f"at most one of 'k', 'batch_size', 'queue' may be given, got {', '.join(given)}")
    if symmetric and batch_size is None:
        raise ValueError("'symmetric' applies to 'batch_size' only: give 'batch_size' with it")
    if k is not None:
        return _int("k", k, 1), "given"
    if queue is not None:
        return _int("queue", queue, 1), "queue of K = {} negatives (MoCo): k = K".format(_int("queue", queue, 1))
    if batch_size is not None:
        b = _int("batch_size", batch_size, 2, K_CAP // 2)
        if symmetric:
            return 2 * b - 2, f"batch size B = {b}, symmetric NT-Xent (both views of the other pairs): k = 2B - 2"
        return b - 1, f"batch size B = {b}, one-directional in-batch loss: k = B - 1"
    return None, ""
