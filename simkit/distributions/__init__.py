"""Distributions on the unit sphere S^{d-1} and the Markov kernels between them.

* data distributions π: :class:`Uniform`, :class:`VonMisesFisher`, :class:`VMFMixture`, :class:`Discrete`
  (:mod:`simkit.distributions.sphere`);
* positive-pair kernels M: :class:`VMFKernel`, :class:`RotatedVMFKernel`, :class:`GeodesicRandomWalk`
  (:mod:`simkit.distributions.kernels`), :class:`BrownianKernel` (:mod:`simkit.distributions.heat`);
* the softmax similarity-search kernel Q and its KL to π (:mod:`simkit.distributions.softmax_kernel`);
* the named settings the studies share (:mod:`simkit.distributions.designs`);
* scikit-learn's digits as a finite law on S^63 with an augmentation kernel (:mod:`simkit.distributions.digits`).

Points are on the last axis, shape ``(..., d)``; every sampler takes a keyword-only ``rng``.
"""

from __future__ import annotations

from simkit.distributions.heat import BrownianKernel
from simkit.distributions.kernels import GeodesicRandomWalk, MarkovKernel, RotatedVMFKernel, VMFKernel
from simkit.distributions.sphere import Discrete, SphereDistribution, Uniform, VMFMixture, VonMisesFisher

__all__ = ["SphereDistribution", "Uniform", "VonMisesFisher", "VMFMixture", "Discrete",
           "MarkovKernel", "VMFKernel", "RotatedVMFKernel", "BrownianKernel", "GeodesicRandomWalk"]
