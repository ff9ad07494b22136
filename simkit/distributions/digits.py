"""scikit-learn's handwritten digits as a finite law on S^63, with a fixed stratified split and an
augmentation kernel.

* :func:`load_split`: the 1,797 8x8 images, normalised onto S^63, split per class by :data:`SPLIT_SEED`
  (a :data:`TEST_FRACTION` share of each class, rounded up, in the test half);
* :func:`augment`: a view of an image (shift by -1/0/+1 pixel per axis, zero fill, Gaussian pixel noise
  clipped at 0), normalised; :func:`augmented_views` embeds r views of each image;
* :func:`training_tuples`: InfoNCE tuples on a subset of rows under the same-digit or the augmentation kernel.
"""

from __future__ import annotations

import functools
import hashlib
import math

import numpy as np
from numpy.typing import NDArray

from simkit.embeddings.training import TrainingSample
from simkit.exact.finite import class_members

__all__ = ["SPLIT_SEED", "TEST_FRACTION", "load_split", "unit_rows", "augment", "augmented_views", "training_tuples"]

#: seed of the stratified train/test split (part of a design: the same for every study seed)
SPLIT_SEED = 20261201
#: share of each digit class in the test split (rounded up)
TEST_FRACTION = 0.5


def unit_rows(x: NDArray, name: str) -> NDArray[np.float64]:
    """``x`` with its rows (last axis) normalised; ``ValueError`` naming ``name`` for a zero row."""
    norm = np.sqrt(np.einsum("...d,...d->...", x, x))
    if np.any(norm == 0):
        raise ValueError(f"'{name}' has a zero row: it has no direction on the sphere")
    return x / norm[..., None]


@functools.lru_cache(maxsize=1)
def load_split() -> dict:
    """The digits with the fixed stratified split (read-only arrays).

    Returns
    -------
    dict
        ``images`` (1797, 64) raw pixel values 0..16, ``unit`` the rows normalised onto S^63,
        ``labels`` (1797,), ``train`` and ``test`` (sorted row indices), ``sha256`` of the test
        indices (int64, little endian).
    """
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    images = np.asarray(images, dtype=float)
    labels = np.asarray(labels, dtype=np.int64)
    gen = np.random.default_rng(SPLIT_SEED)
    test = []
    for c in range(10):
        members = np.flatnonzero(labels == c)
        test.append(gen.permutation(members)[: int(math.ceil(TEST_FRACTION * members.size))])
    test = np.sort(np.concatenate(test))
    train = np.setdiff1d(np.arange(labels.size), test)
    out = {"images": images, "unit": unit_rows(images, "images"), "labels": labels, "train": train, "test": test,
           "sha256": hashlib.sha256(test.astype("<i8").tobytes()).hexdigest()}
    for v in out.values():
        if isinstance(v, np.ndarray):
            v.flags.writeable = False
    return out


def augment(images: NDArray, noise: float, *, rng) -> NDArray[np.float64]:
    """Augmented views of raw 8x8 images (rows of 64 pixels 0..16), normalised onto S^63.

    Each view shifts its image by dy, dx ~ uniform{-1, 0, 1} (zero fill), adds i.i.d. N(0, noise^2)
    pixel noise and clips at 0. Shape ``(..., 64)`` in and out.
    """
    rng = np.random.default_rng(rng)
    flat = np.asarray(images, dtype=float).reshape(-1, 8, 8)
    n = flat.shape[0]
    pad = np.zeros((n, 10, 10))
    pad[:, 1:9, 1:9] = flat
    dy, dx = rng.integers(-1, 2, size=(2, n))
    rows = np.arange(8)[None, :] - dy[:, None] + 1
    cols = np.arange(8)[None, :] - dx[:, None] + 1
    out = pad[np.arange(n)[:, None, None], rows[:, :, None], cols[:, None, :]].reshape(n, 64)
    if noise > 0:
        out = np.maximum(out + noise * rng.standard_normal(out.shape), 0.0)
    return unit_rows(out, "augmented views").reshape(np.shape(images))


def augmented_views(phi, images: NDArray, r: int, noise: float, *, rng) -> NDArray[np.float64]:
    """``phi`` of r augmented views of each of n raw images: shape (n, r, d)."""
    n = np.shape(images)[0]
    views = augment(np.repeat(np.asarray(images)[:, None, :], r, axis=1), noise, rng=rng)
    return phi(views.reshape(-1, 64)).reshape(n, r, -1)


def training_tuples(split: dict, rows: NDArray, kernel: str, n: int, k: int, noise: float, rng):
    """n InfoNCE tuples on the rows ``rows`` of ``split``: anchors uniform with replacement, positives from
    ``kernel`` ("label": uniform over the same digit within ``rows``; "augment": a view of the anchor),
    (n, k) independent uniform negatives. Returns a :class:`simkit.embeddings.training.TrainingSample`."""
    labels = split["labels"][rows]
    a = rng.integers(0, rows.size, n)
    if kernel == "label":
        idx, mask = class_members(labels)
        cnt = mask.sum(axis=1)
        pos = rows[idx[a, (rng.random(n) * cnt[a]).astype(np.int64)]]
        x_pos = split["unit"][pos]
    else:
        x_pos = augment(split["images"][rows[a]], noise, rng=rng)
    neg = rows[rng.integers(0, rows.size, (n, k))]
    return TrainingSample(split["unit"][rows[a]], x_pos, split["unit"][neg])
