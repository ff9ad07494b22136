"""Population quantities of a (trained) embedding, with Monte Carlo standard errors.

docs/theory.md sections 1--3 (claims C1, C3): for an embedding phi and temperature tau,

* ``R_k(phi) = E l_k`` -- the population InfoNCE risk with k negatives;
* ``CE(phi) = -E s(x, x+) + E log Z(x)``, ``Z(x) = E_{y~pi} e^{s(x,y)}`` -- the cross-entropy of M
  against the softmax kernel Q (>= H = -I(x; x+) for uniform pi and a pi-invariant M);
* ``gap_k(phi) = R_k - log k - CE`` -- the finite-k bias of claim C1, for this phi;

and, for a fixed training sample (an :class:`~simkit.embeddings.training.EmpiricalRisk`), the generalisation
gap ``G = R_k(phi) - R_hat_{n,k}(phi)`` and the excess ``E = CE(phi) - (R_hat_{n,k}(phi) - log k)``
of claim C3 (``E = G - gap_k``).

The estimators use fresh data, independent of any training sample (pass a separate ``rng``); the
unit of replication is the anchor (L positives each, k fresh negatives per positive), so the MCSE
is the standard deviation over anchors over sqrt(N). ``log Z(x)`` is exact where it can be
(``z_method``: quadrature for p <= 3, the finite sum for a Discrete pi) and otherwise estimated
from a shared pool whose bias and random error are both reported (``pool_bias``, ``pool_mcse``).
Where CE of the identity is exact, a zero-mean regression control variate removes the positive's
variability that phi shares with the identity. Details of each: docs/design.md,
"simkit.estimators.population".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from numpy.typing import NDArray

from simkit.exact import formulas as exact
from simkit.exact import quadrature
from simkit._jit.blas import single_threaded_blas
from simkit._checks import check_int, check_rng, check_scalar
from simkit.embeddings.embedding import Embedding
from simkit.estimators.infonce import _prefix
from simkit.distributions.kernels import MarkovKernel
from simkit.distributions.sphere import Discrete, SphereDistribution
from simkit.embeddings.training import EmpiricalRisk, TrainingSample

__all__ = ["PopulationEstimate", "GeneralisationReport", "population", "generalisation", "paired_risk_difference",
           "Z_METHODS"]

Z_METHODS = ("auto", "quadrature", "exact", "pool")

#: negatives drawn per batch of anchors in the R_k estimate (bounds memory; fixed, so results do
#: not depend on anything but the arguments and the seed)
_POINTS_PER_BATCH = 1 << 19


@dataclass(frozen=True)
class PopulationEstimate:
    """Monte Carlo estimates of ``R_k(phi)``, ``CE(phi)`` and ``gap_k(phi)`` with their MCSEs (nats).

    Attributes
    ----------
    risk, risk_mcse : float
        ``R_k(phi)``.
    cross_entropy, cross_entropy_mcse : float
        ``CE(phi)``; the MCSE includes the pool's contribution (``pool_mcse``) for ``z_method="pool"``.
    bias_gap, bias_gap_mcse : float
        ``R_k - log k - CE`` from the paired per-anchor differences (claim C1 for this phi).
    k, n_anchors, n_positives : int
    tau : float
    z_method : str
        How log Z was computed: "quadrature", "exact" or "pool".
    pool_size : int
        P (0 unless pool).
    pool_bias : float
        Jackknife estimate of the O(1/P) bias of ``cross_entropy`` (0 unless pool; not subtracted).
    pool_mcse : float
        The pool's share of ``cross_entropy_mcse`` (0 unless pool).
    control : bool
        Whether the identity control variate was used.
    control_coef : tuple of float
        Its fitted coefficients for (risk, cross_entropy) (0 if unused).
    """

    risk: float
    risk_mcse: float
    cross_entropy: float
    cross_entropy_mcse: float
    bias_gap: float
    bias_gap_mcse: float
    k: int
    tau: float
    n_anchors: int
    n_positives: int
    z_method: str
    pool_size: int
    pool_bias: float
    pool_mcse: float
    control: bool
    control_coef: tuple[float, float]

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GeneralisationReport:
    """Claim C3 quantities of an embedding trained on a fixed sample (nats).

    Attributes
    ----------
    train_risk : float
        ``R_hat_{n,k}(phi)`` on the training sample (exact, no Monte Carlo).
    gap, gap_mcse : float
        ``G = R_k(phi) - R_hat_{n,k}(phi)``.
    excess, excess_mcse : float
        ``E = CE(phi) - (R_hat_{n,k}(phi) - log k)``.
    n, k : int
    tau : float
    population : PopulationEstimate
        The population estimates behind G and E.
    """

    train_risk: float
    gap: float
    gap_mcse: float
    excess: float
    excess_mcse: float
    n: int
    k: int
    tau: float
    population: PopulationEstimate

    def as_dict(self) -> dict:
        d = asdict(self)
        d["population"] = self.population.as_dict()
        return d


# ----------------------------------------------------------------------------------------------

def _resolve_z_method(method: str, pi: SphereDistribution) -> str:
    if method not in Z_METHODS:
        raise ValueError(f"'z_method' must be one of {', '.join(Z_METHODS)}, got {method!r}")
    continuous_low = not isinstance(pi, Discrete) and pi.dim in (2, 3)
    if method == "auto":
        return "exact" if isinstance(pi, Discrete) else ("quadrature" if continuous_low else "pool")
    if method == "quadrature" and not continuous_low:
        raise ValueError(f"'z_method' = 'quadrature' needs a continuous pi on S^1 or S^2 (dim 2 or 3), got "
                         f"{type(pi).__name__} with dim {pi.dim}; use 'exact' (Discrete pi) or 'pool'")
    if method == "exact" and not isinstance(pi, Discrete):
        raise ValueError(f"'z_method' = 'exact' needs a Discrete pi, got {type(pi).__name__}; use 'quadrature' "
                         f"(dim <= 3) or 'pool'")
    return method


def _identity_ce(pi, kernel, tau) -> float | None:
    """CE of phi = identity where it is exact (a float), else None."""
    try:
        ce = exact.cross_entropy(pi, kernel, tau)
    except (ValueError, NotImplementedError, TypeError):
        return None
    return float(ce) if isinstance(ce, float) else None


def _regress(y: NDArray, c: NDArray | None) -> tuple[float, float, float, NDArray]:
    """Mean of y adjusted by the zero-mean control c: (estimate, mcse, coefficient, residuals)."""
    n = y.size
    if c is None or np.var(c) == 0.0:
        return float(np.mean(y)), float(np.std(y, ddof=1) / np.sqrt(n)), 0.0, y - np.mean(y)
    cc = c - c.mean()
    beta = float(np.dot(cc, y - y.mean()) / np.dot(cc, cc))
    adj = y - beta * c
    return float(np.mean(adj)), float(np.std(adj, ddof=2) / np.sqrt(n)), beta, adj - np.mean(adj)


def _pool_log_z(phi: Embedding, fx: NDArray, pi: SphereDistribution, tau: float, pool_size: int,
                blocks: int, rng) -> tuple[NDArray, NDArray]:
    """``log Z_hat(x_i)`` from the whole pool, (N,), and with each block left out, (N, B)."""
    fy = phi(pi.rvs(pool_size, rng=rng))
    size = pool_size // blocks
    grid = size * np.arange(1, blocks + 1, dtype=np.int64)
    shift = np.full(fx.shape[0], 1.0 / tau)  # the largest possible score: every exp(.) <= 1
    cum = _prefix(np.ascontiguousarray(fx), np.ascontiguousarray(fy), tau, shift, grid)  # (N, B)
    blk = np.diff(cum, axis=1, prepend=0.0)
    total = cum[:, -1]
    full = np.log(total / pool_size) + shift
    loo = np.log((total[:, None] - blk) / (pool_size - size)) + shift[:, None]
    return full, loo


def population(phi: Embedding, pi: SphereDistribution, kernel: MarkovKernel, tau: float, k: int, *,
               n_anchors: int = 2048, n_positives: int = 4, z_method: str = "auto",
               pool_size: int = 1 << 16, pool_blocks: int = 16, control: bool | str = "auto",
               quad_tol: float = 1e-9, rng=None) -> PopulationEstimate:
    """Estimate ``R_k(phi)``, ``CE(phi)`` and ``gap_k(phi)`` on fresh data (module docstring; docs/design.md).

    Parameters
    ----------
    phi : Embedding
        Embedding of S^{p-1}, ``p = pi.dim``.
    pi, kernel : SphereDistribution, MarkovKernel
        The data distribution and the positive-pair kernel.
    tau : float
        Temperature, > 0.
    k : int
        Number of negatives of ``R_k``.
    n_anchors : int, default 2048
        N, the number of independent anchors (>= 8).
    n_positives : int, default 4
        L, positives per anchor, each with its own k negatives.
    z_method : {"auto", "quadrature", "exact", "pool"}
        How ``log Z(x)`` is computed.
    pool_size, pool_blocks : int
        P and B for ``z_method="pool"``; P a multiple of B, B >= 4.
    control : bool or "auto"
        Use the identity control variate; "auto" uses it where CE of the identity is exact.
    quad_tol : float, default 1e-9
        Tolerance of :func:`simkit.exact.quadrature.log_partition` (relative, on each Z(x)).
    rng : optional
        Seed or Generator (SPEC 7). Draw order: anchors, positives, negatives (in fixed batches of
        anchors), then the pool.

    Returns
    -------
    PopulationEstimate
    """
    if not isinstance(pi, SphereDistribution):
        raise ValueError(f"'pi' must be a simkit sphere distribution, got {type(pi).__name__}")
    if not isinstance(kernel, MarkovKernel):
        raise ValueError(f"'kernel' must be a simkit Markov kernel, got {type(kernel).__name__}")
    if not isinstance(phi, Embedding):
        raise ValueError(f"'phi' must be a simkit Embedding, got {type(phi).__name__}")
    if phi.p != pi.dim:
        raise ValueError(f"'phi' must take points in R^{pi.dim} (the dimension of pi), got p = {phi.p}")
    tau = check_scalar("tau", tau, low=0.0, low_inclusive=False)
    k = check_int("k", k, low=1)
    n = check_int("n_anchors", n_anchors, low=8)
    L = check_int("n_positives", n_positives, low=1)
    method = _resolve_z_method(z_method, pi)
    if method == "pool":
        pool_blocks = check_int("pool_blocks", pool_blocks, low=4)
        pool_size = check_int("pool_size", pool_size, low=pool_blocks)
        if pool_size % pool_blocks:
            raise ValueError(f"'pool_size' must be a multiple of 'pool_blocks' ({pool_blocks}), got {pool_size}")
    quad_tol = check_scalar("quad_tol", quad_tol, low=1e-14, high=1e-3)
    if control not in (True, False, "auto"):
        raise ValueError(f"'control' must be True, False or 'auto', got {control!r}")
    ce_id = _identity_ce(pi, kernel, tau) if control in (True, "auto") else None
    if control is True and ce_id is None:
        raise ValueError("'control' = True needs the exact CE of phi = identity (uniform, single-vMF or Discrete "
                         "pi); use control='auto' or False")
    rng = check_rng(rng)
    # every matrix product here is skinny ((N, p) x (p, d)): threaded BLAS gives nothing and, on the
    # shared 2-core machine, made them up to 30x slower (measured); run it single-threaded
    with single_threaded_blas():
        return _population(phi, pi, kernel, tau, k, n, L, method, pool_size, pool_blocks, ce_id, quad_tol, rng)


def _population(phi, pi, kernel, tau, k, n, L, method, pool_size, pool_blocks, ce_id, quad_tol, rng):
    # draws: anchors, positives, negatives by batches of anchors
    x = pi.rvs(n, rng=rng)
    xr = np.repeat(x, L, axis=0)
    xp = kernel.sample(xr, rng=rng)
    per_anchor = L * (k + 2)
    batch = max(1, _POINTS_PER_BATCH // per_anchor)
    a = np.empty(n)
    for lo in range(0, n, batch):
        hi = min(n, lo + batch)
        sl = slice(lo * L, hi * L)
        y = pi.rvs(((hi - lo) * L, k), rng=rng)
        losses = EmpiricalRisk(TrainingSample(xr[sl], xp[sl], y), tau).losses(phi)
        a[lo:hi] = losses.reshape(hi - lo, L).mean(axis=1)

    fx = phi(x)
    s_mean = (np.sum(np.repeat(fx, L, axis=0) * phi(xp), axis=1) / tau).reshape(n, L).mean(axis=1)
    pool_loo = None
    if method == "pool":
        log_z, pool_loo = _pool_log_z(phi, fx, pi, tau, pool_size, pool_blocks, rng)
    else:
        log_z = quadrature.log_partition(pi, x, tau, phi._embed_unchecked, tol=quad_tol)
    b = -s_mean + log_z

    c = None
    if ce_id is not None:
        s_id = (np.sum(xr * xp, axis=1) / tau).reshape(n, L).mean(axis=1)
        c = -s_id + exact.log_partition(pi, x, tau) - ce_id

    risk, risk_se, beta_r, _ = _regress(a, c)
    ce, ce_se, beta_c, _ = _regress(b, c)
    diff = a - b
    gap_k = float(np.mean(diff) - np.log(k))
    gap_se = float(np.std(diff, ddof=1) / np.sqrt(n))

    pool_bias = pool_se = 0.0
    if pool_loo is not None:
        # delete-one-block jackknife over the pool (anchors fixed): variance and O(1/P) bias of CE
        nb = pool_loo.shape[1]
        ce_loo = np.mean(-s_mean[:, None] + pool_loo, axis=0) - (beta_c * np.mean(c) if c is not None else 0.0)
        pool_bias = float((nb - 1) * (np.mean(ce_loo) - ce))
        pool_se = float(np.sqrt((nb - 1) / nb * np.sum((ce_loo - ce_loo.mean()) ** 2)))
        ce_se = float(np.hypot(ce_se, pool_se))
        gap_se = float(np.hypot(gap_se, pool_se))

    return PopulationEstimate(risk=risk, risk_mcse=risk_se, cross_entropy=ce, cross_entropy_mcse=ce_se,
                              bias_gap=gap_k, bias_gap_mcse=gap_se, k=k, tau=tau, n_anchors=n, n_positives=L,
                              z_method=method, pool_size=pool_size if method == "pool" else 0,
                              pool_bias=pool_bias, pool_mcse=pool_se, control=c is not None,
                              control_coef=(beta_r, beta_c))


def generalisation(phi: Embedding, risk: EmpiricalRisk, pi: SphereDistribution, kernel: MarkovKernel, *,
                   rng=None, **population_kwargs) -> GeneralisationReport:
    """Gap ``G = R_k - R_hat_{n,k}`` and excess ``E = CE - (R_hat_{n,k} - log k)`` of phi (claim C3).

    ``R_hat`` is exact for the training sample of ``risk``; ``R_k`` and ``CE`` are estimated by
    :func:`population` on fresh data from ``rng`` (which must be independent of the training
    sample's), with the temperature and k of ``risk``. Other keywords go to :func:`population`.
    The MCSE of G is that of ``R_k``, the MCSE of E that of ``CE``.
    """
    if not isinstance(risk, EmpiricalRisk):
        raise ValueError(f"'risk' must be an EmpiricalRisk, got {type(risk).__name__}")
    if risk.weighted:
        raise ValueError("'risk' must be unweighted (weights=None): G and E compare R_k with the plain "
                         "empirical risk")
    train_risk = risk.value(phi)
    pop = population(phi, pi, kernel, risk.tau, risk.k, rng=rng, **population_kwargs)
    return GeneralisationReport(train_risk=train_risk, gap=pop.risk - train_risk, gap_mcse=pop.risk_mcse,
                                excess=pop.cross_entropy - (train_risk - float(np.log(risk.k))),
                                excess_mcse=pop.cross_entropy_mcse, n=risk.n, k=risk.k, tau=risk.tau,
                                population=pop)


def paired_risk_difference(phi: Embedding, reference: Embedding, pi: SphereDistribution, kernel: MarkovKernel,
                           k: int, n_tuples: int, *, tau: float, reference_tau: float | None = None, chunk: int,
                           rng, risk=EmpiricalRisk) -> exact.Estimate:
    """``R_k(phi) - R_k(reference)`` on fresh tuples, paired: both losses on the same tuples.

    Parameters
    ----------
    phi, reference : Embedding
        The trained embedding and a fixed reference (e.g. the identity, whose ``R_k`` may be exact:
        then ``R_k(phi)`` = exact ``R_k(reference)`` + this difference, with far less noise than R_k alone).
    pi, kernel : the data distribution and positive kernel the tuples are drawn from.
    k, n_tuples : int
        Negatives per tuple and the number of fresh tuples, drawn ``chunk`` at a time from one stream
        (bounds memory; the tuples drawn depend on ``chunk``, so a design fixes it).
    tau, reference_tau : float
        Temperatures of phi's and the reference's losses (``reference_tau`` defaults to ``tau``).
    rng : seed or Generator
        The fresh tuples' random numbers (independent of the training sample's).
    risk : type
        The risk class whose ``losses(phi)`` is phi's loss per tuple (:class:`EmpiricalRisk`, or a
        subclass such as :class:`simkit.embeddings.lifted.LiftedRisk` for lifted embeddings); the
        reference's loss is always :class:`EmpiricalRisk`'s.

    Returns
    -------
    Estimate
        The mean difference over tuples and its MCSE (sd / sqrt(n_tuples)).
    """
    ref_tau = tau if reference_tau is None else reference_tau
    ev_rng = np.random.default_rng(rng)
    diffs = []
    for lo in range(0, n_tuples, chunk):
        ev = TrainingSample.draw(pi, kernel, min(chunk, n_tuples - lo), k, rng=ev_rng)
        diffs.append(risk(ev, tau).losses(phi) - EmpiricalRisk(ev, ref_tau).losses(reference))
    diff = np.concatenate(diffs)
    return exact.Estimate(float(diff.mean()), float(diff.std(ddof=1) / np.sqrt(diff.size)))
