"""Exact first and second moments of a positive pair (x, x+), x ~ pi, x+ ~ M(x, .): the
non-reversibility statistics of claim C7.

For the vMF, rotated vMF and Brownian kernels the conditional mean is linear, ``E[x+ | x] = B x``
(:func:`mean_map`), so the cross-moment ``E[x x+^T] = E[x x^T] B^T`` follows from the moments of pi
(a vMF mixture). :func:`asymmetry_exact` gives its antisymmetric part and the mean shift, both zero
for a pi-reversible kernel ((x, x+) exchangeable).
"""

from __future__ import annotations

import numpy as np

from simkit.distributions.heat import BrownianKernel
from simkit.distributions.kernels import RotatedVMFKernel, VMFKernel

__all__ = ["mean_map", "asymmetry_exact"]


def mean_map(kernel, d: int) -> np.ndarray:
    """B with ``E[x+ | x] = B x`` (exact): A_d(kappa) R, A_d(kappa) I or exp(-(d-1)t/2) I."""
    if isinstance(kernel, RotatedVMFKernel):
        return VMFKernel(kernel.kappa).mean_cosine(d) * kernel.rotation
    if isinstance(kernel, BrownianKernel):
        return kernel.mean_cosine(d) * np.eye(d)
    return VMFKernel(kernel.kappa).mean_cosine(d) * np.eye(d)


def asymmetry_exact(pi, kernel) -> tuple[float, float]:
    """Exact ``E[x_1 x+_2 - x_2 x+_1]`` and ``E[x+_1 - x_1]`` (first two coordinates; x ~ pi, x+ ~ M(x)).

    Both vanish when M is pi-reversible ((x, x+) is then exchangeable). With ``C = E[x x+^T] =
    E[x x^T] B^T`` (B from :func:`mean_map`) the first is ``C_12 - C_21``; the second is
    ``(B m - m)_1`` with ``m = E x``. Moments of a vMF mixture: ``E x = sum w A_d(kappa) mu``,
    ``E[x x^T] = sum w [(A/kappa) I + (1 - d A/kappa) mu mu^T]`` (I/d for kappa = 0).
    """
    d = pi.dim
    w, mus, kappas = pi.as_mixture()
    m, second = np.zeros(d), np.zeros((d, d))
    for wj, mu, k in zip(w, mus, kappas):
        a = VMFKernel(k).mean_cosine(d) if k > 0 else 0.0
        ak = 1.0 / d if k < 1e-8 else a / k
        m += wj * a * mu
        second += wj * (ak * np.eye(d) + (1.0 - d * ak) * np.outer(mu, mu))
    b = mean_map(kernel, d)
    c = second @ b.T
    return float(c[0, 1] - c[1, 0]), float((b @ m - m)[0])
