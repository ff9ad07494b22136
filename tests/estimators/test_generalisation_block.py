"""One replicate of the generalisation gap (simkit.estimators.generalisation).

* identity_constants: at tau = 1/kappa_M the identity's softmax kernel is M itself, so CE(M, Q) equals
  H = -I(x; x+) (docs/theory.md section 2), an identity between two separate exact computations; R_k(id) =
  log k + CE + gap_k; a rotated kernel leaves R_k(id) unknown (NaN).
* gap_block: the control variate is exactly the train-minus-population risk of the reference, and with
  R_k(reference) unknown G_cv is still computed (R_k cancels), G is not.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simkit import RotatedVMFKernel, Uniform, VMFKernel
from simkit.embeddings.embedding import LinearEmbedding
from simkit.embeddings.training import TrainingSample
from simkit.estimators.generalisation import GAP_BLOCK_STATS, gap_block, identity_constants


def test_identity_constants_at_matched_temperature():
    c = identity_constants(Uniform(3), VMFKernel(10.0), 0.1, 8, rng=np.random.default_rng(0))
    assert float(c["ce_id"]) == pytest.approx(float(c["entropy"]), rel=1e-8)
    assert float(c["risk_id"]) == pytest.approx(math.log(8) + float(c["ce_id"]) + float(c["gap_id"]), rel=1e-14)
    assert float(c["gap_id"]) > 0
    rot = identity_constants(Uniform(3), RotatedVMFKernel.plane_rotation(3, 0.5, 10.0), 0.1, 8,
                             rng=np.random.default_rng(0))
    assert math.isnan(float(rot["risk_id"])) and math.isnan(float(rot["entropy"]))


@pytest.mark.deterministic(reason="algebraic identities of one replicate (rtol 1e-12), whatever the draw")
def test_gap_block_control_variate_identities():
    pi, kernel, tau = Uniform(3), VMFKernel(10.0), 0.1
    sample = TrainingSample.draw(pi, kernel, 32, 4, rng=1)
    c = identity_constants(pi, kernel, tau, 4, rng=np.random.default_rng(3))
    kw = dict(family="linear", d=3, reference=LinearEmbedding.identity(3), restarts=1, n_eval=256,
              ce_id=float(c["ce_id"]))
    # fresh seed sequences per call: spawning children advances a SeedSequence
    out = gap_block(sample, pi, kernel, tau, risk_id=float(c["risk_id"]), seeds=np.random.SeedSequence(2).spawn(3), **kw)
    assert set(out) == set(GAP_BLOCK_STATS)
    assert float(out["gap_cv"] - out["gap"]) == pytest.approx(float(out["train_risk_id"]) - float(c["risk_id"]),
                                                               rel=1e-12, abs=1e-12)
    assert 0 < float(out["isometry"]) <= 1 and math.isnan(float(out["excess"]))  # no excess asked for
    unknown = gap_block(sample, pi, kernel, tau, risk_id=math.nan, seeds=np.random.SeedSequence(2).spawn(3), **kw)
    assert math.isnan(float(unknown["gap"])) and float(unknown["gap_cv"]) == pytest.approx(float(out["gap_cv"]),
                                                                                          rel=1e-12)
