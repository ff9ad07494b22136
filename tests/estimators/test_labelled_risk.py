"""R_k of an embedding on a labelled population (simkit.estimators.labelled.population_risk), against a
per-tuple loop written here from the definitions, on the same random draws.

Deterministic: fixed seed, identical draws; the loop and the library agree to rounding.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simkit.estimators.labelled import population_risk
from simkit.exact.finite import class_members


def _population(seed=0, n=10, d=3):
    rng = np.random.default_rng(seed)
    emb = rng.standard_normal((n, d))
    return emb / np.linalg.norm(emb, axis=1, keepdims=True), np.array([0, 1, 2, 0, 1, 2, 0, 0, 1, 2])


@pytest.mark.deterministic(reason="same draws in the library and in the loop; agreement to 1e-12")
def test_population_risk_same_class_kernel_by_a_loop():
    emb, labels = _population()
    tau, k, r = 0.5, 4, 3
    idx, mask = class_members(labels)
    risk, ce = population_risk(emb, idx, mask, k, r, tau, np.random.default_rng(1))
    s = emb @ emb.T / tau
    log_z = np.log(np.mean(np.exp(s), axis=1))  # Z(x) = E_y e^{s(x, y)}, y uniform over all rows
    ce_loop = np.mean([log_z[i] - np.mean(s[i, labels == labels[i]]) for i in range(len(labels))])
    rng = np.random.default_rng(1)  # the library's draws: positives (one uniform per tuple), then negatives
    u = rng.random((len(labels), r))
    neg = rng.integers(0, len(labels), size=(len(labels), r, k))
    terms = []
    for i in range(len(labels)):
        members = np.flatnonzero(labels == labels[i])
        for j in range(r):
            s_pos = s[i, members[int(u[i, j] * members.size)]]
            t = np.exp(s[i, neg[i, j]] - log_z[i]).sum()
            terms.append(math.log((math.exp(s_pos - log_z[i]) + t) / k) - (t / k - 1.0))
    assert ce == pytest.approx(ce_loop, rel=1e-12)
    assert risk == pytest.approx(math.log(k) + ce_loop + np.mean(terms), rel=1e-12)


@pytest.mark.deterministic(reason="views equal to the anchors: CE is a closed form, agreement to 1e-12")
def test_population_risk_with_views_uses_their_scores():
    emb, labels = _population(2)
    idx, mask = class_members(labels)
    views = lambda r: np.repeat(emb[:, None, :], r, axis=1)  # noqa: E731  (each view is the anchor itself)
    _, ce = population_risk(emb, idx, mask, 2, 2, 0.5, np.random.default_rng(0), views)
    s = emb @ emb.T / 0.5
    assert ce == pytest.approx(np.mean(np.log(np.mean(np.exp(s), axis=1)) - np.diag(s)), rel=1e-12)
