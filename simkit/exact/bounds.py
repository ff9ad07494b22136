"""The value of a Theorem-1-type generalisation bound for a class Lipschitz in its parameters (claim C3).

docs/theory.md section 3 (claim C3, Theorem 1) states the bound only through its rates and gives **no
constants**. This module evaluates a bound of that structure with constants derived in docs/theory.md
section 13 (symmetrisation, an epsilon-net and Massart's finite-class lemma, McDiarmid), so that the
realised gap of a study can be set beside a number: a k-free loss Lipschitz constant
``L_loss = 4 L_phi / tau`` and range ``D = 4/tau``; the complexity term
``Rad_n <= min(D, inf_eps [L_loss eps + D sqrt(2 P log(1 + 4 rho / eps) / n)])`` with
``E[G] <= 2 Rad_n`` for the ERM; the sample-variability term ``D sqrt(log(1/eta) / (2 n))`` (per
training set, not in the bound on E[G]); and the finite-k bias reported as the plug-in
``|c1(identity)| / k``, which is **not** a bound (a bound on G is fully specified, one on E is not).

The linear family ``phi_W(x) = W x / |W x|`` is scale-invariant and not Lipschitz near singular W.
:func:`linear_class_constants` gives the constants of its compact subclass
``Theta_s = {W : ||W||_op = 1, sigma_min(W) >= s}`` (P = p^2 parameters, Frobenius radius sqrt(p),
``L_phi = 2/s``). A trained phi_hat belongs to Theta_s when ``sigma_min/sigma_max >= s`` of its W;
the ERM over the full family is then also the ERM over Theta_s.

:func:`bound_averaging` and :func:`bound_max` set the two routes to a bound on E[G] side by side
(docs/theory.md section 18): the net applied to the loss class with the k-free Lipschitz constant of the
softmax average, and the earlier route through a vector contraction over the k score differences, whose
constant grows like sqrt(k).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from simkit._checks import check_int, check_scalar

__all__ = ["Theorem1Bound", "theorem1_bound", "rademacher_bound", "net_bound", "linear_class_constants",
           "linear_class_bound", "control_tau", "BoundComparison", "compare_to_bound", "bound_averaging", "bound_max"]


def net_bound(eps: float, n: int, n_params: int, radius: float, loss_lipschitz: float, loss_range: float) -> float:
    """``L_loss eps + D sqrt(2 P log(1 + 4 rho / eps) / n)``: the Rademacher bound at one net scale eps.

    Unchecked arguments (see :func:`rademacher_bound`); vectorised over ``eps``.
    """
    eps = np.asarray(eps, dtype=float)
    return loss_lipschitz * eps + loss_range * np.sqrt(2.0 * n_params * np.log1p(4.0 * radius / eps) / n)


def rademacher_bound(n: int, n_params: int, radius: float, loss_lipschitz: float, loss_range: float) -> tuple[float, float]:
    """The bound ``min(D, inf_eps net_bound(eps))`` on the empirical Rademacher complexity, and the minimising eps.

    Parameters
    ----------
    n : int
        Training tuples.
    n_params : int
        Dimension P of the parameter set.
    radius : float
        rho: the parameter set lies in a Euclidean ball of this radius.
    loss_lipschitz : float
        L_loss: ``|l(theta) - l(theta')| <= L_loss ||theta - theta'||`` (from a net centre).
    loss_range : float
        D: sup over the sample space of ``|l(theta) - l(theta')|`` over the class.

    Returns
    -------
    (bound, eps) : tuple of float
        The infimum over a log grid of 4001 scales in ``[1e-12, 4 rho]`` refined by golden-section
        search (the function is convex in log eps to the precision needed); eps = NaN when the trivial
        bound D is the smaller.
    """
    n = check_int("n", n, low=1)
    n_params = check_int("n_params", n_params, low=1)
    radius = check_scalar("radius", radius, low=0.0, low_inclusive=False)
    lip = check_scalar("loss_lipschitz", loss_lipschitz, low=0.0, low_inclusive=False)
    d = check_scalar("loss_range", loss_range, low=0.0, low_inclusive=False)
    best, eps = _net_inf(n, n_params, radius, lip, d)
    if best >= d:
        return d, float("nan")
    return best, eps


def _net_inf(n: int, n_params: int, radius: float, lip: float, d: float) -> tuple[float, float]:
    """``inf_eps net_bound(eps)`` (no cap) and the minimising eps: a log grid of 4001 scales in
    ``[1e-12, 4 rho]`` refined by golden-section search. Unchecked arguments."""
    grid = np.exp(np.linspace(math.log(1e-12), math.log(4.0 * radius), 4001))
    vals = net_bound(grid, n, n_params, radius, lip, d)
    i = int(np.argmin(vals))
    lo, hi = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, grid.size - 1)])
    f = lambda u: float(net_bound(math.exp(u), n, n_params, radius, lip, d))  # noqa: E731
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    for _ in range(80):
        c, e = b - g * (b - a), a + g * (b - a)
        if f(c) < f(e):
            b = e
        else:
            a = c
    u = 0.5 * (a + b)
    return min((f(u), math.exp(u)), (float(vals[i]), float(grid[i])))


def _class_args(n, tau, n_params, radius, phi_lipschitz):
    n = check_int("n", n, low=1)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    n_params = check_int("n_params", n_params, low=1)
    radius = check_scalar("radius", radius, low=0.0, low_inclusive=False)
    lphi = check_scalar("phi_lipschitz", phi_lipschitz, low=0.0, low_inclusive=False)
    return n, tau, n_params, radius, lphi


def bound_averaging(n: int, tau: float, *, n_params: int, radius: float, phi_lipschitz: float) -> float:
    """The averaging route's bound on E[G] (docs/theory.md sections 13 and 18), without the trivial cap.

    ``2 inf_eps [L eps + D sqrt(2 P log(1 + 4 rho / eps) / n)]`` with ``L = 4 L_phi / tau`` (the loss is
    1-Lipschitz in the max norm of the scores: its gradient is a softmax average) and ``D = 4 / tau``.
    It does not depend on k. The trivial bound on E[G] is D (``4 / tau``); the value returned may exceed it
    (a vacuous bound), so that its dependence on n and k can be read off.
    """
    n, tau, n_params, radius, lphi = _class_args(n, tau, n_params, radius, phi_lipschitz)
    return 2.0 * _net_inf(n, n_params, radius, 4.0 * lphi / tau, 4.0 / tau)[0]


def bound_max(n: int, k: int, tau: float, *, n_params: int, radius: float, phi_lipschitz: float) -> float:
    """The earlier route's bound on E[G]: vector contraction over the k score differences (docs/theory.md section 18).

    ``2 sqrt(2) inf_eps [k L_r eps + sqrt(k) D_r sqrt(2 P log(1 + 4 rho / eps) / n)]`` with
    ``L_r = 4 L_phi / tau`` (each score difference r_j = u.(w_j - v) / tau moves by at most this per unit
    of parameter) and ``D_r = 2 / tau`` (``|r_j| <= 2 / tau``): Maurer's contraction for the loss,
    1-Lipschitz in the Euclidean norm of r in R^k, then the net and Massart on the n k coordinates.
    Grows like sqrt(k) (times a logarithm); no trivial cap is applied (see :func:`bound_averaging`).
    """
    n, tau, n_params, radius, lphi = _class_args(n, tau, n_params, radius, phi_lipschitz)
    k = check_int("k", k, low=1)
    rk = math.sqrt(k)
    # k L eps + sqrt(k) D sqrt(.) = sqrt(k) [sqrt(k) L eps + D sqrt(.)]
    return 2.0 * math.sqrt(2.0) * rk * _net_inf(n, n_params, radius, rk * 4.0 * lphi / tau, 2.0 / tau)[0]


def linear_class_constants(p: int, s: float) -> dict[str, float]:
    """Constants of ``Theta_s = {W (p x p): ||W||_op = 1, sigma_min(W) >= s}`` for ``phi_W = W x / |W x|``.

    Returns ``{"n_params": p^2, "radius": sqrt(p), "phi_lipschitz": 2/s}`` (docs/theory.md section 13).
    """
    p = check_int("p", p, low=2)
    s = check_scalar("s", s, low=0.0, high=1.0, low_inclusive=False)
    return {"n_params": p * p, "radius": math.sqrt(p), "phi_lipschitz": 2.0 / s}


@dataclass(frozen=True)
class Theorem1Bound:
    """The terms of the bound (nats) for one (n, k, tau) and class (see :func:`theorem1_bound`)."""

    complexity: float       # 2 Rad_n bound: bounds E[G] for the ERM
    variability: float      # D sqrt(log(1/eta) / (2n)): McDiarmid term at level eta
    bias: float             # |c1| / k, plug-in value of the 1/k term (NaN if c1 unknown): not a bound
    loss_lipschitz: float   # 4 L_phi / tau
    loss_range: float       # 4 / tau
    eps: float              # net scale of the complexity term (NaN: trivial bound D used)

    @property
    def expectation(self) -> float:
        """Bound on E[G] (fully specified): the complexity term."""
        return self.complexity

    @property
    def high_probability(self) -> float:
        """Bound on G of one training set with probability >= 1 - eta: complexity + variability."""
        return self.complexity + self.variability

    @property
    def total(self) -> float:
        """complexity + variability + the plug-in 1/k term: the three terms of Theorem 1 for E (not fully a bound)."""
        return self.complexity + self.variability + self.bias


def theorem1_bound(n: int, k: int, tau: float, *, n_params: int, radius: float, phi_lipschitz: float,
                   eta: float = 0.05, c1: float = float("nan")) -> Theorem1Bound:
    """Evaluate the Theorem-1-type bound of docs/theory.md section 13.

    Parameters
    ----------
    n, k : int
        Training tuples and negatives per tuple (k enters only the 1/k term).
    tau : float
        Temperature (> 0) of the score ``phi(x).phi(y) / tau``.
    n_params, radius, phi_lipschitz : int, float, float
        The class: P parameters in a ball of radius rho, ``|phi_theta(x) - phi_theta'(x)| <= L_phi
        ||theta - theta'||`` (e.g. :func:`linear_class_constants`).
    eta : float
        Level of the high-probability (McDiarmid) term, in (0, 1).
    c1 : float
        C1's leading bias constant (docs/theory.md section 3) for the plug-in 1/k term; NaN if unknown.

    Returns
    -------
    Theorem1Bound

    Raises
    ------
    ValueError
        If an argument is outside its range (the message names it).
    """
    k = check_int("k", k, low=1)
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    eta = check_scalar("eta", eta, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    lphi = check_scalar("phi_lipschitz", phi_lipschitz, low=0.0, low_inclusive=False)
    lip, d = 4.0 * lphi / tau, 4.0 / tau
    rad, eps = rademacher_bound(n, n_params, radius, lip, d)
    c1 = float(c1)
    return Theorem1Bound(complexity=2.0 * rad, variability=d * math.sqrt(math.log(1.0 / eta) / (2.0 * n)),
                         bias=abs(c1) / k if math.isfinite(c1) else float("nan"), loss_lipschitz=lip, loss_range=d,
                         eps=eps)


def linear_class_bound(n: int, k: int, tau: float, c1: float = float("nan"), *, p: int, s: float,
                       eta: float) -> Theorem1Bound:
    """:func:`theorem1_bound` for the linear class ``Theta_s`` of :func:`linear_class_constants` (p x p, s)."""
    return theorem1_bound(n, k, tau, eta=eta, c1=c1, **linear_class_constants(p, s))


def control_tau(tau: float, level: float, level_ref: float) -> float:
    """Temperature of a positive control at ``level`` (k or d): ``tau sqrt(level_ref / level)``.

    Notes
    -----
    At temperature ``tau_k`` the score ``phi(x).phi(y) / tau_k`` of a fixed class is that of the
    embedding ``r phi`` with radius ``r = (level / level_ref)^{1/4}`` at tau. The loss class's
    Lipschitz constant in the parameters ``4 L_phi / tau_k`` and range ``4 / tau_k`` both grow like
    sqrt(level), so the complexity term of :func:`theorem1_bound` (linear in both up to the logarithm)
    grows like sqrt(level): the growth earlier bounds allow and Theorem 1 excludes (docs/theory.md
    section 13). A test of "no growth in the level" must flag this class.
    """
    return float(tau) * math.sqrt(float(level_ref) / float(level))


@dataclass(frozen=True)
class BoundComparison:
    """Estimates set against bound values point by point (see :func:`compare_to_bound`)."""

    specified: np.ndarray   # bool: bound finite, the class holds (in_class == 1) and the upper limit finite
    above: np.ndarray       # bool: specified and upper limit > bound
    outside: np.ndarray     # bool: bound finite but not specified
    max_ratio: float        # largest upper / bound over the specified points (NaN if none)

    @property
    def passed(self) -> bool:
        """At least one specified point, and the upper limit within the bound at every one."""
        return bool(self.specified.any() and not self.above.any())


def compare_to_bound(bound: np.ndarray, upper: np.ndarray, in_class: np.ndarray) -> BoundComparison:
    """Compare upper confidence limits of an estimate with the values of a bound, per point.

    A point is specified where the bound is finite, every trained embedding lies in the bound's
    class (``in_class == 1``, the fraction of replicates) and ``upper`` is finite; the check is
    deterministic given the upper limits (no false-failure rate beyond that of ``upper``).
    """
    spec = np.isfinite(bound) & (in_class == 1.0) & np.isfinite(upper)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = upper[spec] / bound[spec]
    return BoundComparison(spec, spec & (upper > bound), np.isfinite(bound) & ~spec,
                           float(np.max(ratio)) if ratio.size else float("nan"))
