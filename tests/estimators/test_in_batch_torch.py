"""simkit's in-batch losses against what practitioners run: pytorch-metric-learning's NTXentLoss and a
CLIP-style cross-entropy over the batch similarity matrix in torch, on identical embeddings and batches.

The batch is B items (x_i, x_i⁺). For anchor x_i simkit's negatives are the B − 1 other items' pairs
(x_j, x_j⁺) (NT-Xent) or their second views x_j⁺ (CLIP); the torch losses see the whole batch and mask
the anchor's own item themselves, so agreement checks that the two conventions are the same loss.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pml_losses = pytest.importorskip("pytorch_metric_learning.losses")
pml_reducers = pytest.importorskip("pytorch_metric_learning.reducers")

from simkit.estimators.in_batch import in_batch_losses  # noqa: E402

TOL = 1e-10  # float64 on both sides; the torch side adds finfo.tiny inside its log


def _batch(b, d, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(b, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    xp = x + 0.4 * rng.normal(size=(b, d))
    xp /= np.linalg.norm(xp, axis=1, keepdims=True)
    return x, xp


def _simkit_per_anchor(x, xp, tau, scheme):
    """Loss of each anchor i: its positive, the other items' pairs as the stream of B − 1 pairs."""
    b = x.shape[0]
    out = np.empty(b)
    for i in range(b):
        rest = np.arange(b) != i
        out[i] = in_batch_losses(x[i:i + 1], xp[i:i + 1], x[rest], xp[rest], tau, [b - 1])[scheme][0, 0]
    return out


@pytest.mark.deterministic(reason="fixed embeddings, no sampling in the comparison; tolerance is float64 rounding")
@pytest.mark.parametrize("b, d, tau", [(2, 3, 0.5), (17, 3, 0.1), (64, 16, 0.07)])
def test_ntxent_matches_pytorch_metric_learning(b, d, tau):
    """NTXentLoss over the 2B views with labels (i, i): its per-positive-pair losses are simkit's NT-Xent
    losses in both directions (anchor x_i, positive x_i⁺, and anchor x_i⁺, positive x_i)."""
    x, xp = _batch(b, d, seed=b)
    loss_fn = pml_losses.NTXentLoss(temperature=tau, reducer=pml_reducers.DoNothingReducer())
    emb = torch.from_numpy(np.vstack([x, xp]))
    labels = torch.arange(b).repeat(2)
    got = loss_fn(emb, labels)["loss"]
    a1, p = (t.numpy() for t in got["indices"])
    theirs = got["losses"].detach().numpy()
    forward = _simkit_per_anchor(x, xp, tau, "ntxent")
    backward = _simkit_per_anchor(xp, x, tau, "ntxent")
    ours = np.where(a1 < b, forward[a1 % b], backward[a1 % b])
    assert np.array_equal(p % b, a1 % b) and a1.size == 2 * b
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL)
    mean_torch = float(pml_losses.NTXentLoss(temperature=tau)(emb, labels))
    assert abs(0.5 * (forward.mean() + backward.mean()) - mean_torch) < TOL


@pytest.mark.deterministic(reason="fixed embeddings, no sampling in the comparison; tolerance is float64 rounding")
@pytest.mark.parametrize("b, d, tau", [(2, 3, 0.5), (33, 8, 0.05), (128, 32, 0.07)])
def test_clip_matches_torch_cross_entropy(b, d, tau):
    """CLIP's image-to-text term, cross_entropy(x x⁺ᵀ / τ, arange(B)) per row, is simkit's CLIP loss."""
    x, xp = _batch(b, d, seed=100 + b)
    logits = torch.from_numpy(x) @ torch.from_numpy(xp).T / tau
    theirs = torch.nn.functional.cross_entropy(logits, torch.arange(b), reduction="none").numpy()
    np.testing.assert_allclose(_simkit_per_anchor(x, xp, tau, "clip"), theirs, rtol=0, atol=TOL)


@pytest.mark.deterministic(reason="fixed embeddings; the wrong convention differs by > 1e-3, far above TOL")
def test_positive_control_wrong_convention_disagrees():
    """The comparison can fail: simkit's i.i.d. loss on the first views only (k = B − 1), or NT-Xent with
    the anchor's own item left in, is not what NTXentLoss computes."""
    b, d, tau = 17, 3, 0.1
    x, xp = _batch(b, d, seed=b)
    theirs = pml_losses.NTXentLoss(temperature=tau, reducer=pml_reducers.DoNothingReducer())(
        torch.from_numpy(np.vstack([x, xp])), torch.arange(b).repeat(2))["loss"]["losses"].detach().numpy()[:b]
    assert np.max(np.abs(_simkit_per_anchor(x, xp, tau, "iid") - theirs)) > 1e-3
    own_item_in = in_batch_losses(x, xp, x, xp, tau, [b])["ntxent"][:, 0]
    assert np.max(np.abs(own_item_in - theirs)) > 1e-3
