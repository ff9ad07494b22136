"""Trainable embeddings φ_θ: S^{p-1} → S^{d-1} and their deterministic training on the empirical
InfoNCE risk (claims C3–C6).

* :mod:`simkit.embeddings.embedding`: :class:`LinearEmbedding`, :class:`TwoLayerEmbedding`;
* :mod:`simkit.embeddings.lifted`: :class:`FourierEmbedding`, whose size does not depend on d;
* :mod:`simkit.embeddings.training`: the empirical risk, its analytic gradient and :func:`train`;
* :mod:`simkit.embeddings.perturbation`, :mod:`simkit.embeddings.random_features`: perturbed and fixed embeddings.
"""

from __future__ import annotations

from simkit.embeddings.embedding import Embedding, LinearEmbedding, TwoLayerEmbedding
from simkit.embeddings.lifted import FourierEmbedding
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, train

__all__ = ["Embedding", "LinearEmbedding", "TwoLayerEmbedding", "FourierEmbedding", "EmpiricalRisk",
           "TrainingSample", "train"]
