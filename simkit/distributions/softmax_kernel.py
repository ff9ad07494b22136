"""The softmax retrieval kernel Q(x, .) of docs/theory.md section 2 as a distribution, and its KL to pi.

For phi = identity and a temperature tau, ``Q(x, dy) = e^{s(x,y)} pi(dy) / Z(x)`` with
``s(x, y) = x.y / tau``; its density w.r.t. pi is ``q(x, y) = e^{s(x,y)} / Z(x)``. Claim C5 rests on
``|s| <= 1/tau``, whence ``e^{-2/tau} <= q <= e^{2/tau}`` and ``KL(Q(x, .) || pi) <= 2/tau``.

For a vMF mixture ``pi = sum_j w_j vMF(mu_j, kappa_j)`` (Uniform and VonMisesFisher included)
``Q(x, .)`` is itself a vMF mixture (*derived here*): with ``a = 1/tau`` and
``r_j = ||kappa_j mu_j + a x||``,

    Q(x, .) = sum_j rho_j vMF(nu_j, r_j),  nu_j = (kappa_j mu_j + a x) / r_j,
    rho_j = w_j Z_j / Z,  Z_j = C_d(kappa_j) / C_d(r_j),  Z = sum_j w_j Z_j,

which gives an exact sampler (:func:`q_distribution`) and the closed forms

* :func:`q_mean_cosine` -- ``E_{y~Q(x,.)}[x.y] = d/da log Z(a x) = sum_j rho_j A_d(r_j) (a + kappa_j mu_j.x) / r_j``
  (since ``d/dr log C_d(r) = -A_d(r)`` and ``dr_j/da = (a + kappa_j mu_j.x) / r_j``);
* :func:`kl_q_pi` -- ``KL(Q(x,.) || pi) = E_Q log q = a E_Q[x.y] - log Z(x)``.

Two Monte Carlo estimators of the same KL, per anchor, with their Monte Carlo standard errors:
:func:`kl_importance` (``y ~ pi``: ``E_pi[q log q]``, valid for any embedding but heavy-tailed at
small tau, where ``E_pi[q^2] = Z2/Z^2`` is large) and :func:`kl_direct` (``y ~ Q(x, .)`` by the exact
sampler: ``E_Q[log q]``, bounded summands).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import logsumexp

from simkit._jit.rng import draw_key
from simkit._jit.sampling import sample_vmf
from simkit._jit.special import log_vmf_norm, mean_resultant_length
from simkit._checks import check_int, check_points, check_rng
from simkit.exact.formulas import unit_anchors, check_pi, check_tau, log_partition
from simkit.distributions.sphere import Discrete, SphereDistribution, VMFMixture

__all__ = ["q_components", "q_distribution", "q_mean_cosine", "kl_q_pi", "sample_q", "kl_importance",
           "kl_direct", "kl_estimates"]


def _components(pi: SphereDistribution, x: NDArray, tau: float):
    """(log rho (..., m), r (..., m), cosine x.nu_j (..., m), log Z (...)) for a vMF-mixture pi."""
    w, mus, kappas = pi.as_mixture()
    d = pi.dim
    a = 1.0 / tau
    dots = x @ mus.T  # mu_j . x
    # ||kappa_j mu_j + a x||^2 = kappa_j^2 + a^2 + 2 a kappa_j mu_j.x, as in exact.log_partition
    r = np.sqrt(np.maximum(kappas**2 + a * a + 2.0 * a * kappas * dots, 0.0))
    with np.errstate(divide="ignore"):  # zero-weight components get rho_j = 0
        log_wz = np.log(w) + log_vmf_norm(d, kappas) - log_vmf_norm(d, r)
    log_z = logsumexp(log_wz, axis=-1)
    # x . nu_j = (a + kappa_j mu_j.x) / r_j; at r_j = 0 (kappa_j mu_j = -a x) the component is uniform
    with np.errstate(divide="ignore", invalid="ignore"):
        cos = np.where(r > 0, (a + kappas * dots) / np.where(r > 0, r, 1.0), 0.0)
    return log_wz - log_z[..., None], r, np.clip(cos, -1.0, 1.0), log_z


def q_components(pi: SphereDistribution, x: ArrayLike, tau: float) -> tuple[NDArray, NDArray, NDArray]:
    """The vMF-mixture form of ``Q(x, .)`` for a vMF-mixture pi.

    Parameters
    ----------
    pi : Uniform, VonMisesFisher or VMFMixture
        Data distribution on S^{d-1}.
    x : array_like, shape (..., d)
        Anchors (unit vectors).
    tau : float
        Temperature > 0.

    Returns
    -------
    weights : ndarray, shape (..., m)
        ``rho_j = w_j Z_j(x) / Z(x)``, summing to 1 over the last axis.
    means : ndarray, shape (..., m, d)
        Unit mean directions ``nu_j = (kappa_j mu_j + x/tau) / r_j`` (``x`` where ``r_j = 0``).
    concentrations : ndarray, shape (..., m)
        ``r_j = ||kappa_j mu_j + x/tau||``.

    Notes
    -----
    ``e^{x.y/tau} C_d(kappa_j) e^{kappa_j mu_j.y} = Z_j C_d(r_j) e^{r_j nu_j.y}`` with
    ``Z_j = C_d(kappa_j)/C_d(r_j)``: each component of pi is tilted into another vMF.
    """
    pi = check_pi(pi)
    if isinstance(pi, Discrete):
        raise ValueError("'pi' must be a vMF mixture (Uniform, VonMisesFisher, VMFMixture); for a Discrete pi "
                         "Q(x, .) is discrete with weights proportional to w_i exp(x.p_i / tau)")
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    log_rho, r, _, _ = _components(pi, x, tau)
    _, mus, kappas = pi.as_mixture()
    v = kappas[:, None] * mus + x[..., None, :] / tau
    with np.errstate(divide="ignore", invalid="ignore"):
        nu = np.where(r[..., None] > 0, v / np.where(r > 0, r, 1.0)[..., None], x[..., None, :])
    nu = nu / np.sqrt(np.sum(nu * nu, axis=-1, keepdims=True))
    return np.exp(log_rho), nu, r


def q_distribution(pi: SphereDistribution, x: ArrayLike, tau: float) -> SphereDistribution:
    """``Q(x, .)`` for one anchor ``x`` (shape ``(d,)``) as a frozen simkit distribution.

    A :class:`~simkit.distributions.sphere.VMFMixture` for a vMF-mixture pi (see :func:`q_components`); a
    :class:`~simkit.distributions.sphere.Discrete` with weights proportional to ``w_i e^{x.p_i/tau}`` for a
    Discrete pi.
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    if x.ndim != 1:
        raise ValueError(f"'x' must be one anchor of shape ({pi.dim},), got shape {x.shape}")
    if isinstance(pi, Discrete):
        with np.errstate(divide="ignore"):
            lw = np.log(pi.weights) + (pi.points @ x) / tau
        w = np.exp(lw - logsumexp(lw))
        return Discrete(pi.points, w / w.sum())
    rho, nu, r = q_components(pi, x, tau)
    return VMFMixture(rho / rho.sum(), nu, r)


def q_mean_cosine(pi: SphereDistribution, x: ArrayLike, tau: float) -> NDArray[np.float64]:
    """``E_{y~Q(x,.)}[x.y] = d/da log Z(a x)`` at ``a = 1/tau``, per anchor (shape ``x.shape[:-1]``).

    Notes
    -----
    ``log Z(a x) = log sum_j w_j C_d(kappa_j)/C_d(r_j(a))`` and ``d/dr log C_d(r) = -A_d(r)``, so
    ``E_Q[x.y] = sum_j rho_j A_d(r_j) (a + kappa_j mu_j.x) / r_j``: the mean resultant length of each
    tilted component times the cosine between x and its mean direction. For a Discrete pi,
    ``sum_i rho_i x.p_i``.
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    return _mean_cosine(pi, x, tau)


def _mean_cosine(pi: SphereDistribution, x: NDArray, tau: float) -> NDArray:
    if isinstance(pi, Discrete):
        with np.errstate(divide="ignore"):
            lw = np.log(pi.weights) + (x @ pi.points.T) / tau
        rho = np.exp(lw - logsumexp(lw, axis=-1, keepdims=True))
        return np.sum(rho * (x @ pi.points.T), axis=-1)
    log_rho, r, cos, _ = _components(pi, x, tau)
    return np.sum(np.exp(log_rho) * mean_resultant_length(pi.dim, r) * cos, axis=-1)


def kl_q_pi(pi: SphereDistribution, x: ArrayLike, tau: float) -> NDArray[np.float64]:
    """``KL(Q(x, .) || pi)`` in nats, per anchor (shape ``x.shape[:-1]``), exact.

    Parameters
    ----------
    pi : SphereDistribution
        Uniform, VonMisesFisher, VMFMixture or Discrete.
    x : array_like, shape (..., d)
        Anchors (unit vectors).
    tau : float
        Temperature > 0.

    Returns
    -------
    ndarray
        ``E_{y~Q(x,.)} log q(x, y) = E_Q[x.y]/tau - log Z(x)`` (:func:`q_mean_cosine`,
        :func:`simkit.exact.log_partition`), which is at most ``2/tau`` (docs/theory.md section 2).

    Notes
    -----
    Uniform pi: Q(x, .) = vMF(x, 1/tau) and the KL is ``a A_d(a) + log C_d(a) - log C_d(0)``, the
    mutual information of a vMF kernel with ``kappa = a`` (:func:`simkit.exact.mutual_information`).
    As tau -> infinity the KL is ``Var_pi(x.y) / (2 tau^2) + O(tau^-3)``; as tau -> 0 it grows like
    ``((d-1)/2) log(1/tau)`` for a continuous pi, far below the bound ``2/tau``.

    References
    ----------
    docs/theory.md section 2 (temperature as a regulariser) and claim C5.
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    if isinstance(pi, Discrete):
        s = (x @ pi.points.T) / tau
        with np.errstate(divide="ignore"):  # zero-weight atoms contribute nothing
            lw = np.log(pi.weights) + s
        log_z = logsumexp(lw, axis=-1)
        return np.sum(np.exp(lw - log_z[..., None]) * s, axis=-1) - log_z
    log_rho, r, cos, log_z = _components(pi, x, tau)
    return np.sum(np.exp(log_rho) * mean_resultant_length(pi.dim, r) * cos, axis=-1) / tau - log_z


def sample_q(pi: SphereDistribution, x: ArrayLike, tau: float, n: int, *, rng=None) -> NDArray[np.float64]:
    """``n`` draws from ``Q(x, .)`` for each anchor: shape ``(n_anchors, n, d)`` for ``x`` of shape ``(n_anchors, d)``.

    Exact: for a vMF-mixture pi, a component ``j`` with probability ``rho_j(x)`` and then
    ``vMF(nu_j, r_j)`` (:func:`q_components`), all anchors in one call of the vMF sampler; for a
    Discrete pi, atoms with the weights of :func:`q_distribution`. Same law as
    ``q_distribution(pi, x[i], tau).rvs(n)`` for each anchor (not the same stream).
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    if x.ndim != 2:
        raise ValueError(f"'x' must have shape (n_anchors, {pi.dim}), got {x.shape}")
    n = check_int("n", n, low=1)
    rng = check_rng(rng)
    n_a, d = x.shape
    if isinstance(pi, Discrete):
        return np.stack([q_distribution(pi, x[i], tau).rvs(n, rng=rng) for i in range(n_a)])
    rho, nu, r = q_components(pi, x, tau)
    cum = np.cumsum(rho, axis=1)
    cum[:, -1] = 1.0  # guard the last edge against rounding
    u = rng.random((n_a, n))
    comp = np.minimum(np.sum(u[:, :, None] >= cum[:, None, :], axis=2), rho.shape[1] - 1)  # inverse CDF
    rows = np.arange(n_a)[:, None]
    out = np.empty((n_a * n, d))
    sample_vmf(np.ascontiguousarray(nu[rows, comp].reshape(-1, d)), np.ascontiguousarray(r[rows, comp].ravel()),
               draw_key(rng), out)
    return out.reshape(n_a, n, d)


def kl_importance(pi: SphereDistribution, x: ArrayLike, y: ArrayLike, tau: float) -> tuple[NDArray, NDArray, NDArray]:
    """Importance-form Monte Carlo of ``KL(Q(x,.) || pi) = E_{y~pi}[q log q]``, per anchor.

    Parameters
    ----------
    pi : SphereDistribution
        Data distribution (for the exact ``Z(x)``).
    x : array_like, shape (n_anchors, d)
        Anchors.
    y : array_like, shape (n, d)
        Draws from pi, shared by the anchors (each anchor's estimate is unbiased on its own).
    tau : float
        Temperature > 0.

    Returns
    -------
    estimate, mcse, ess : ndarray, shape (n_anchors,)
        ``mean_i q_i log q_i`` with ``q_i = e^{x.y_i/tau} / Z(x)`` (exact Z), its standard error
        ``sd / sqrt(n)``, and the effective sample size ``(sum q_i)^2 / sum q_i^2`` of the weights.

    Notes
    -----
    ``q log q`` (rather than ``q s``, equal in expectation up to ``log Z``) keeps ``log Z`` out of the
    summands' variance. The variance grows with ``E_pi[q^2] = Z2/Z^2``, so at small tau the
    summands are heavy-tailed, the ESS is small and the sample MCSE itself is unreliable (it
    tends to be too small, and the estimate too low): compare with :func:`kl_direct`.
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    y = check_points("y", y, pi.dim)
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError(f"'x' and 'y' must have shapes (n_anchors, {pi.dim}) and (n, {pi.dim}), "
                         f"got {x.shape} and {y.shape}")
    n = y.shape[0]
    if n < 2:
        raise ValueError(f"'y' must hold at least 2 draws, got {n}")
    log_q = (x @ y.T) / tau - log_partition(pi, x, tau)[:, None]
    q = np.exp(log_q)
    v = q * log_q
    ess = q.sum(axis=1) ** 2 / np.sum(q * q, axis=1)
    return v.mean(axis=1), v.std(axis=1, ddof=1) / np.sqrt(n), ess


def kl_direct(pi: SphereDistribution, x: ArrayLike, y_q: ArrayLike, tau: float) -> tuple[NDArray, NDArray]:
    """Direct Monte Carlo of ``KL(Q(x,.) || pi) = E_{y~Q(x,.)}[log q(x, y)]``, per anchor.

    Parameters
    ----------
    x : array_like, shape (n_anchors, d)
        Anchors.
    y_q : array_like, shape (n_anchors, n, d)
        Draws from ``Q(x, .)`` for each anchor (:func:`sample_q`).

    Returns
    -------
    estimate, mcse : ndarray, shape (n_anchors,)
        ``mean_i (x.y_i/tau - log Z(x))`` and ``sd / sqrt(n)``; the summands lie in
        ``[-2/tau, 2/tau]``.
    """
    pi = check_pi(pi)
    tau = check_tau(tau)
    x = unit_anchors(x, pi.dim)
    y_q = check_points("y_q", y_q, pi.dim)
    if x.ndim != 2 or y_q.ndim != 3 or y_q.shape[0] != x.shape[0]:
        raise ValueError(f"'y_q' must have shape (n_anchors, n, {pi.dim}) with n_anchors = {x.shape[0]}, "
                         f"got {y_q.shape}")
    n = y_q.shape[1]
    if n < 2:
        raise ValueError(f"'y_q' must hold at least 2 draws per anchor, got {n}")
    log_q = np.einsum("id,ind->in", x, y_q) / tau - log_partition(pi, x, tau)[:, None]
    return log_q.mean(axis=1), log_q.std(axis=1, ddof=1) / np.sqrt(n)


def kl_estimates(pi: SphereDistribution, tau: float, n_anchors: int, n_samples: int, *, rng) -> dict[str, NDArray]:
    """KL(Q(x,.) || pi) at ``n_anchors`` anchors x ~ pi: the closed form (``kl_exact``), the importance
    estimate from ``n_samples`` draws y ~ pi shared by the anchors (``kl_is``, its MCSE and effective
    sample size ``kl_is_ess``; :func:`kl_importance`) and the direct estimate from ``n_samples`` draws
    y ~ Q(x,.) per anchor (``kl_q`` and its MCSE; :func:`kl_direct`). Draws: x, then y ~ pi, then y ~ Q."""
    x = pi.rvs(n_anchors, rng=rng)
    y = pi.rvs(n_samples, rng=rng)
    kl_is, kl_is_se, ess = kl_importance(pi, x, y, tau)
    kl_q, kl_q_se = kl_direct(pi, x, sample_q(pi, x, tau, n_samples, rng=rng), tau)
    return {"kl_exact": kl_q_pi(pi, x, tau), "kl_q": kl_q, "kl_q_mcse": kl_q_se, "kl_is": kl_is,
            "kl_is_mcse": kl_is_se, "kl_is_ess": ess}
