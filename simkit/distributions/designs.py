"""Named design settings every study draws from: data distributions π on S^{d-1}, positive-pair
kernels M and their parameters.

A *setting* is a small dict of JSON scalars (the cell coordinates of a study): ``pi`` ("uniform",
"vmf" with mean e_1, or "mixture"), ``dim``, ``kappa_pi``, and for the kernel ``kernel`` ("vmf",
"rotated", "brownian") with ``kappa_m``, ``angle`` or ``t``. :func:`build_pi` and
:func:`build_kernel` turn it into simkit objects, so two studies that name the same setting test
the same mathematics (their random numbers still differ: seeds include the study name).
"""

from __future__ import annotations

import math

import numpy as np

from simkit.distributions.heat import BrownianKernel
from simkit.distributions.kernels import RotatedVMFKernel, VMFKernel
from simkit.distributions.sphere import Uniform, VMFMixture, VonMisesFisher

__all__ = ["MIXTURE_SEED", "MIXTURE_WEIGHTS", "RATE_SETTINGS", "SEARCH_SETTINGS", "ASYMMETRY_SETTINGS",
           "build_pi", "build_kernel", "mixture_means", "vmf_cells"]

#: the mixture's means are drawn uniformly on the sphere from this seed (a fixed part of the design)
MIXTURE_SEED = 7
MIXTURE_WEIGHTS = (0.4, 0.3, 0.2, 0.1)

#: the C1 catalogue: name -> (pi family, dim, kappa_pi, kappa_M of a vMF kernel, tau)
RATE_SETTINGS = {
    "uniform-d3": ("uniform", 3, 0.0, 10.0, 0.1),
    "vmf-d8": ("vmf", 8, 2.0, 10.0, 0.2),
    "mixture-d16": ("mixture", 16, 6.0, 20.0, 0.25),
    "uniform-d16": ("uniform", 16, 0.0, 8.0, 0.125),
    "vmf-d3": ("vmf", 3, 4.0, 10.0, 0.2),
}

#: the C2 catalogue, same layout. uniform-d3 and vmf-d8 are the C1 settings; the mixture has
#: kappa_M = 10 instead of 20: at 20 the importance weights' second moment w2 = E m(x, x+) is ~965
#: (tail up to 1e5), so the expansion regime k >= 16 w2 would start beyond 2^18; at 10, w2 = 36.6.
SEARCH_SETTINGS = {
    "uniform-d3": ("uniform", 3, 0.0, 10.0, 0.1),
    "vmf-d8": ("vmf", 8, 2.0, 10.0, 0.2),
    "mixture-d16": ("mixture", 16, 6.0, 10.0, 0.25),
    "uniform-d16": ("uniform", 16, 0.0, 8.0, 0.125),
}

#: the C7 catalogue: non-reversible kernels (and a reversible control) with the queries per C2
#: block (the Brownian density is a ~20-term series per pair, so its blocks are smaller)
ASYMMETRY_SETTINGS = {
    "rot-uniform-d3": {"kernel": "rotated", "angle": 2.6, "kappa_m": 10.0, "t": math.nan, "pi": "uniform",
                       "dim": 3, "kappa_pi": 0.0, "tau": 0.1, "search_anchors": 256},
    "rot-vmf-d8": {"kernel": "rotated", "angle": math.pi / 3, "kappa_m": 10.0, "t": math.nan, "pi": "vmf",
                   "dim": 8, "kappa_pi": 2.0, "tau": 0.2, "search_anchors": 256},
    "brown-vmf-d3": {"kernel": "brownian", "angle": math.nan, "kappa_m": math.nan, "t": 0.2, "pi": "vmf",
                     "dim": 3, "kappa_pi": 2.0, "tau": 0.2, "search_anchors": 64},
    "brown-vmf-d8": {"kernel": "brownian", "angle": math.nan, "kappa_m": math.nan, "t": 0.2, "pi": "vmf",
                     "dim": 8, "kappa_pi": 4.0, "tau": 0.2, "search_anchors": 64},
    "vmf-uniform-d3": {"kernel": "vmf", "angle": math.nan, "kappa_m": 10.0, "t": math.nan, "pi": "uniform",
                       "dim": 3, "kappa_pi": 0.0, "tau": 0.1, "search_anchors": 256},
}


def vmf_cells(catalogue: dict, cfg: dict) -> list[dict]:
    """The cells of the settings ``cfg["settings"]`` (comma-separated names of ``catalogue``, laid out as
    :data:`RATE_SETTINGS`), each with ``setting``, ``pi``, ``dim``, ``kappa_pi``, ``kappa_m`` and ``tau``;
    a value of ``cfg`` under those names that is not None overrides the catalogue's in every setting
    (``kappa_pi`` not for uniform π)."""
    def pick(name, own):
        return own if cfg.get(name) is None else cfg[name]

    out = []
    for name in cfg["settings"].split(","):
        family, d, kp, km, tau = catalogue[name]
        out.append({"setting": name, "pi": family, "dim": int(pick("dim", d)),
                    "kappa_pi": float(kp if family == "uniform" else pick("kappa_pi", kp)),
                    "kappa_m": float(pick("kappa_m", km)), "tau": float(pick("tau", tau))})
    return out


def mixture_means(dim: int) -> np.ndarray:
    """The mixture's component means in dimension ``dim`` (uniform draws from :data:`MIXTURE_SEED`)."""
    return Uniform(dim).rvs(len(MIXTURE_WEIGHTS), rng=np.random.default_rng(MIXTURE_SEED))


def build_pi(cell: dict):
    """The data distribution of a setting: ``cell["pi"]`` in {"uniform", "vmf", "mixture"}, ``dim``,
    ``kappa_pi`` (the vMF has mean e_1; the mixture :data:`MIXTURE_WEIGHTS` and :func:`mixture_means`)."""
    d = int(cell["dim"])
    if cell["pi"] == "uniform":
        return Uniform(d)
    if cell["pi"] == "vmf":
        mu = np.zeros(d)
        mu[0] = 1.0
        return VonMisesFisher(mu, float(cell["kappa_pi"]))
    if cell["pi"] == "mixture":
        return VMFMixture(MIXTURE_WEIGHTS, mixture_means(d), [float(cell["kappa_pi"])] * len(MIXTURE_WEIGHTS))
    raise ValueError(f"'pi' must be uniform, vmf or mixture, got {cell['pi']!r}")


def build_kernel(cell: dict):
    """The positive kernel of a setting: ``cell["kernel"]`` in {"vmf" (default), "rotated", "brownian"}."""
    kind = cell.get("kernel", "vmf")
    if kind == "rotated":
        return RotatedVMFKernel.plane_rotation(int(cell["dim"]), float(cell["angle"]), float(cell["kappa_m"]))
    if kind == "brownian":
        return BrownianKernel(float(cell["t"]))
    if kind == "vmf":
        return VMFKernel(float(cell["kappa_m"]))
    raise ValueError(f"'kernel' must be vmf, rotated or brownian, got {kind!r}")


def fibonacci_sphere(n: int) -> np.ndarray:
    """``n`` nearly evenly spread points on S² (the Fibonacci lattice; deterministic, no seed)."""
    i = np.arange(int(n)) + 0.5
    z = 1.0 - 2.0 * i / n
    phi = np.pi * (1.0 + 5.0 ** 0.5) * i
    r = np.sqrt(1.0 - z * z)
    return np.column_stack([r * np.cos(phi), r * np.sin(phi), z])


def vmf_grid(n: int, kappa_pi: float, kappa_m: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A vMF π (mean e_3, concentration ``kappa_pi``) and a vMF-like kernel (``kappa_m``) on the ``n``-point
    Fibonacci lattice of S²: points, π ∝ exp(κ_π x·e_3), M(a, b) ∝ exp(κ_M x_a·x_b) row-normalised.

    A finite π whose exact in-batch curves are computable (simkit.exact.in_batch); πM ≠ π.
    """
    pts = fibonacci_sphere(n)
    w = np.exp(kappa_pi * (pts[:, 2] - 1.0))
    m = np.exp(kappa_m * (pts @ pts.T - 1.0))
    return pts, w / w.sum(), m / m.sum(axis=1, keepdims=True)
