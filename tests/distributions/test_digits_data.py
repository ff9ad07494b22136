"""The digits design pieces (simkit.distributions.digits): embedded augmented views and training tuples.
The split and the augmentation itself are checked against their recipes in tests/studies/test_digits.py."""

from __future__ import annotations

import numpy as np

from simkit.distributions.digits import augment, augmented_views, load_split, training_tuples


def test_augmented_views_are_the_views_embedded():
    split = load_split()
    img = split["images"][:6]
    phi = lambda u: 2.0 * u  # noqa: E731  (any map on the last axis)
    v = augmented_views(phi, img, 3, 1.0, rng=4)
    ref = augment(np.repeat(img[:, None, :], 3, axis=1), 1.0, rng=4)
    assert v.shape == (6, 3, 64) and np.array_equal(v, 2.0 * ref)


def test_label_tuples_pair_each_anchor_with_its_digit():
    split = load_split()
    rows = split["train"][:200]
    t = training_tuples(split, rows, "label", 50, 4, 1.0, np.random.default_rng(0))
    unit, labels = split["unit"], split["labels"]
    lab = {tuple(np.round(unit[r], 12)): labels[r] for r in rows}
    for a, p in zip(t.x, t.x_pos):
        assert lab[tuple(np.round(a, 12))] == lab[tuple(np.round(p, 12))]
    assert t.negatives.shape == (50, 4, 64)
    aug = training_tuples(split, rows, "augment", 50, 4, 1.0, np.random.default_rng(0))
    assert np.allclose(np.linalg.norm(aug.x_pos, axis=1), 1.0)
