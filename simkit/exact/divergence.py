"""Divergences of the kernels against pi: the entropy term H of CE's lower bound and the largest
``KL(Q(x, .) || pi)`` over anchors (claim C5's bound ``KL <= 2/tau``; docs/theory.md sections 2 and 5).

Exact for uniform and single-vMF pi (closed forms, a 1-D grid); a Monte Carlo estimate or a probe
maximum for mixtures, whose ``rng`` is then required (no hidden default seed).
"""

from __future__ import annotations

import math

import numpy as np

from simkit.distributions.kernels import VMFKernel
from simkit.distributions.softmax_kernel import kl_q_pi
from simkit.distributions.sphere import Uniform, VonMisesFisher
from simkit.exact import formulas as exact
from simkit.exact.special import log_vmf_norm, mean_resultant_length

__all__ = ["entropy_h", "kl_sup", "temperature_constants", "N_SUP_GRID", "N_SUP_PROBES"]

#: grid of mu.x for the exact supremum of the per-anchor KL over x (single-vMF pi)
N_SUP_GRID = 2001
#: probe points for the largest exact KL when pi is a mixture (half from pi, half uniform)
N_SUP_PROBES = 8192


def _mc_rng(rng, what: str) -> np.random.Generator:
    if rng is None:
        raise ValueError(f"'rng' is required: {what} needs Monte Carlo for a mixture pi (no hidden default seed); "
                         "pass a seed or a numpy Generator, e.g. the study task's rng")
    return np.random.default_rng(rng)


def entropy_h(pi, kappa_m: float, *, n_mc: int = exact.DEFAULT_MC_SIZE, rng=None):
    """``H = -E_x KL(M(x, .) || pi)`` for M = vMF(x, kappa_M): the lower bound of CE (docs/theory.md section 2).

    Single vMF pi (or uniform): ``-[log C_d(kappa_M) + kappa_M A_d(kappa_M) - log C_d(kappa_pi)
    - kappa_pi A_d(kappa_M) A_d(kappa_pi)]`` (*derived here*: E_{y~M(x)} mu.y = A_d(kappa_M) mu.x and
    E_x mu.x = A_d(kappa_pi)), a float; for uniform pi this is -I(x; x+). Mixture: ``-E log m(x, x+)``
    by Monte Carlo over (x, x+) from ``rng`` (required there), an :class:`simkit.exact.Estimate`.
    """
    d = pi.dim
    km = float(kappa_m)
    if isinstance(pi, (Uniform, VonMisesFisher)):
        kp = 0.0 if isinstance(pi, Uniform) else float(pi.kappa)
        am = float(mean_resultant_length(d, km))
        ap = float(mean_resultant_length(d, kp))
        return -float(log_vmf_norm(d, km) + km * am - log_vmf_norm(d, kp) - kp * am * ap)
    r = _mc_rng(rng, "entropy_h")
    kernel = VMFKernel(km)
    x = pi.rvs(n_mc, rng=r)
    v = exact.log_m(pi, kernel, x, kernel.sample(x, rng=r))
    return exact.Estimate(-float(v.mean()), float(v.std(ddof=1) / math.sqrt(n_mc)))


def kl_sup(pi, tau: float, *, rng=None) -> float:
    """Largest exact ``KL(Q(x, .) || pi)`` over x.

    Uniform pi: the constant value. Single vMF pi: the KL depends on x only through mu.x; the
    maximum over a grid of N_SUP_GRID values of mu.x in [-1, 1]. Mixture: the maximum over
    N_SUP_PROBES random probe points from ``rng`` (required there; half from pi, half uniform), a
    lower bound on the supremum.
    """
    d = pi.dim
    if isinstance(pi, Uniform):
        return float(kl_q_pi(pi, np.eye(d)[:1], tau)[0])
    if isinstance(pi, VonMisesFisher):
        mu = pi.mu
        e = np.zeros(d)
        e[np.argmin(np.abs(mu))] = 1.0
        perp = e - (e @ mu) * mu
        perp /= np.linalg.norm(perp)
        theta = np.linspace(0.0, np.pi, N_SUP_GRID)
        x = np.cos(theta)[:, None] * mu + np.sin(theta)[:, None] * perp
        return float(np.max(kl_q_pi(pi, x, tau)))
    r = _mc_rng(rng, "kl_sup")
    x = np.concatenate([pi.rvs(N_SUP_PROBES // 2, rng=r), Uniform(d).rvs(N_SUP_PROBES // 2, rng=r)])
    return float(np.max(kl_q_pi(pi, x, tau)))


def _value_mcse(v) -> tuple[float, float]:
    return (float(v.value), float(v.mcse)) if isinstance(v, exact.Estimate) else (float(v), 0.0)


def temperature_constants(pi, kappa_m: float, tau: float, grid, *, n_mc: int, rng) -> dict[str, np.ndarray]:
    """The exact constants of claim C5 at phi = identity, M = vMF(kappa_m), for the k ``grid``:
    ``c1``, ``ce``, ``kl_mean`` (E_x KL(Q(x,.) || pi)) and ``entropy`` (H) as (value, MCSE) pairs (MCSE 0
    where exact, Monte Carlo over x from ``rng`` for mixtures, in that order), the expansion scales
    ``rho`` = E[Z2/Z^2] and ``mbar`` = E[m1/Z], ``kl_sup`` (:func:`kl_sup`) and ``gap_exact`` on the
    grid (uniform pi only; NaN otherwise)."""
    kernel = VMFKernel(kappa_m)
    c1 = _value_mcse(exact.bias_constant(pi, kernel, tau, n_mc=n_mc, rng=rng))
    ce = _value_mcse(exact.cross_entropy(pi, kernel, tau, n_mc=n_mc, rng=rng))
    rho, mbar = exact.expansion_scales(pi, kernel, tau, n_mc=n_mc, rng=rng)
    klm = _value_mcse(exact.expectation(pi, lambda x: kl_q_pi(pi, x, tau), isotropic=True, n_mc=n_mc, rng=rng))
    h = _value_mcse(entropy_h(pi, kappa_m, n_mc=n_mc, rng=rng))
    gex = exact.gap_exact(kernel, pi.dim, tau, grid) if isinstance(pi, Uniform) else np.full(np.size(grid), np.nan)
    return {"c1": np.array(c1), "ce": np.array(ce), "rho": np.array(rho), "mbar": np.array(mbar),
            "kl_mean": np.array(klm), "kl_sup": np.array(kl_sup(pi, tau, rng=rng)), "entropy": np.array(h),
            "gap_exact": gex}
