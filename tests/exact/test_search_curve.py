"""Tests of simkit.exact.search_curve against independent truths: brute-force enumeration of small
finite laws, a tensor Gauss--Legendre rule written here (uniform pi on S^2, k = 1, 2, 3), and the
d1/k asymptote with d1 from closed forms derived here (vMF pi on S^7), sharing none of the module's
rules or constants."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import ive

from simkit import VMFKernel
from simkit.distributions.sphere import Uniform, VMFMixture, VonMisesFisher
from simkit.exact.search_curve import discrete_d_curve, search_d_curve, snis_bias


# ----------------------------------------------------------------------------------------------
# finite laws: brute force

def _brute_d(ps, pw, ns, nm, nw, k):
    """D_k by enumerating every (S0, y_1..y_k): E log(e^{S0} + S_k) - E log S_k + E V_k/W_k - E_M s."""
    mu = math.fsum(nw[i] * nm[i] * ns[i] for i in range(len(ns))) / math.fsum(nw[i] * nm[i] for i in range(len(ns)))
    t1, t2 = [], []
    for combo in itertools.product(range(len(ns)), repeat=k):
        wt = math.prod(nw[c] for c in combo)
        s_k = math.fsum(math.exp(ns[c]) for c in combo)
        v = math.fsum(nm[c] * ns[c] for c in combo)
        w = math.fsum(nm[c] for c in combo)
        t2.append(wt * (v / w - math.log(s_k)))
        for p in range(len(ps)):
            t1.append(pw[p] * wt * math.log(math.exp(ps[p]) + s_k))
    return math.fsum(t1) + math.fsum(t2) - mu


def test_discrete_d_curve_brute_force():
    rng = np.random.default_rng(20261205)
    n_a, n_p, n_n = 2, 3, 4
    ps = rng.normal(size=(n_a, n_p)) * 3.0
    pw = rng.dirichlet(np.ones(n_p), size=n_a)
    ns = rng.normal(size=(n_a, n_n)) * 3.0
    nm = np.exp(rng.normal(size=(n_a, n_n)) * 2.0)
    nw = rng.dirichlet(np.ones(n_n), size=n_a)
    ks = [1, 2, 3, 4, 5]
    got = discrete_d_curve(ps, pw, ns, nm, nw, ks)
    for a in range(n_a):
        for j, k in enumerate(ks):
            want = _brute_d(ps[a], pw[a], ns[a], nm[a], nw[a], k)
            assert got[a, j] == pytest.approx(want, rel=1e-10, abs=1e-12)
    # positive control: the comparison resolves one step of k (D_k and D_{k+1} differ far beyond the tolerance)
    assert abs(_brute_d(ps[0], pw[0], ns[0], nm[0], nw[0], 3) - got[0, 1]) > 1e-4


def test_snis_bias_scale_invariance_and_two_atoms():
    """V/W does not depend on the scale of m; for two atoms and k = 2 the bias has a closed form."""
    m, s, w = np.array([[0.5, 3.0]]), np.array([[1.0, -2.0]]), np.array([[0.3, 0.7]])
    mu = (0.3 * 0.5 * 1.0 + 0.7 * 3.0 * -2.0) / (0.3 * 0.5 + 0.7 * 3.0)
    mixed = 2 * 0.3 * 0.7 * (0.5 * 1.0 + 3.0 * -2.0) / 3.5
    want = 0.09 * 1.0 + 0.49 * -2.0 + mixed - mu
    assert snis_bias(m, s, w, [2])[0, 0] == pytest.approx(want, rel=1e-12)
    assert snis_bias(m * 1e6, s, w, [2])[0, 0] == pytest.approx(want, rel=1e-12)


# ----------------------------------------------------------------------------------------------
# uniform pi on S^2: a tensor Gauss--Legendre rule over (w0, w1, ..., wk), written here

def _uniform_d3_tensor(kappa, tau, k, n):
    """D_k for uniform pi on S^2, vMF(kappa) kernel: the cosine w of a database point is U(-1, 1),
    the positive's has density kappa e^{kappa w} / (2 sinh kappa), m(w) = kappa e^{kappa w} / sinh kappa."""
    z, g = np.polynomial.legendre.leggauss(n)
    wu = g / 2.0                                        # U(-1, 1)
    wp = g * kappa * np.exp(kappa * z) / (2 * math.sinh(kappa))
    m = kappa * np.exp(kappa * z) / math.sinh(kappa)
    s = z / tau
    grids = np.meshgrid(*([z] * k), indexing="ij")
    weight = np.ones([n] * k)
    for i in range(k):
        weight = weight * wu.reshape([n if j == i else 1 for j in range(k)])
    s_k = sum(np.exp(gr / tau) for gr in grids)
    mm = [kappa * np.exp(kappa * gr) / math.sinh(kappa) for gr in grids]
    ratio = sum(mi * gr / tau for mi, gr in zip(mm, grids)) / sum(mm)
    log_pos = np.log(np.exp(s)[:, None] + s_k.reshape(1, -1))  # (n, n^k)
    t1 = float(wp @ log_pos @ weight.reshape(-1)) - float(np.sum(weight * np.log(s_k)))
    mean_s0 = float(np.dot(wp, s))
    assert abs(float(np.dot(wu, m)) - 1.0) < 1e-12        # E_pi m = 1 on this rule
    return t1 + float(np.sum(weight * ratio)) - mean_s0


@pytest.mark.parametrize("k,n", [(1, 200), (2, 160), (3, 60)])
def test_uniform_d3_against_tensor_rule(k, n):
    curve = search_d_curve(Uniform(3), VMFKernel(10.0), 0.1, [1, 2, 3])
    want = _uniform_d3_tensor(10.0, 0.1, k, n)
    assert curve.d[k - 1] == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_uniform_d3_tensor_rule_has_converged():
    """The independent rule is itself converged at the sizes used (else the comparison proves nothing)."""
    assert _uniform_d3_tensor(10.0, 0.1, 2, 160) == pytest.approx(_uniform_d3_tensor(10.0, 0.1, 2, 120), rel=1e-11)


# ----------------------------------------------------------------------------------------------
# vMF pi on S^7: k D_k -> d1, d1 from closed forms derived here

def _log_c(d, kappa):
    """log C_d(kappa), the vMF normaliser on S^{d-1}."""
    nu = d / 2 - 1
    return nu * math.log(kappa) - (d / 2) * math.log(2 * math.pi) - (math.log(ive(nu, kappa)) + kappa)


def _a(d, kappa):
    return ive(d / 2, kappa) / ive(d / 2 - 1, kappa)


def _d1_vmf(d, kp, km, tau):
    """d1 = E_x[m1/Z - Cov_M(m, s)] for pi = vMF(e, kp), M = vMF(x, km), s = x.y/tau, via the
    vMF moment generating function: E_pi e^{v.y} = C(kp)/C(|kp e + v|), E_v[y] = A(|v|) v/|v|."""
    def inner(c):
        z = math.exp(_log_c(d, kp) - _log_c(d, math.sqrt(kp * kp + 2 * kp * c / tau + 1 / tau ** 2)))
        m1 = math.exp(_log_c(d, km) - _log_c(d, km + 1 / tau))
        r = math.sqrt(4 * km * km - 4 * km * kp * c + kp * kp)
        em = math.exp(2 * _log_c(d, km) - _log_c(d, kp) - _log_c(d, r))   # E_M m = E_pi m^2
        ems = em * _a(d, r) * (2 * km - kp * c) / r / tau                 # E_M[m s]
        return m1 / z - (ems - em * _a(d, km) / tau)

    dens = lambda c: math.exp(kp * (c - 1)) * (1 - c * c) ** ((d - 3) / 2)  # noqa: E731
    num = integrate.quad(lambda c: dens(c) * inner(c), -1, 1, epsabs=0, epsrel=1e-12, limit=200)[0]
    return num / integrate.quad(dens, -1, 1, epsabs=0, epsrel=1e-12, limit=200)[0]


def test_vmf_d8_large_k_against_closed_form_d1():
    d1 = _d1_vmf(8, 2.0, 10.0, 0.2)
    ks = np.array([1 << 15, 1 << 16])
    curve = search_d_curve(VonMisesFisher(np.eye(8)[0], 2.0), VMFKernel(10.0), 0.2, ks)
    kd = ks * curve.d
    richardson = 2 * kd[1] - kd[0]  # removes d2/k
    assert richardson == pytest.approx(d1, rel=2e-5)
    # positive control: without the extrapolation the O(1/k) term is visible at this tolerance
    assert abs(kd[0] - d1) > 2e-5 * abs(d1)


def test_uniform_d16_large_k_against_closed_form_d1():
    """Uniform pi is vMF with kappa_pi -> 0: the same closed form at a tiny kp."""
    d1 = _d1_vmf(16, 1e-9, 8.0, 0.125)
    ks = np.array([1 << 16, 1 << 17])
    kd = ks * search_d_curve(Uniform(16), VMFKernel(8.0), 0.125, ks).d
    assert 2 * kd[1] - kd[0] == pytest.approx(d1, rel=1e-6)


@pytest.mark.slow
def test_vmf_rules_converged():
    pi = VonMisesFisher(np.eye(8)[0], 2.0)
    ks = [1, 2, 4, 64, 4096]
    a = search_d_curve(pi, VMFKernel(10.0), 0.2, ks).d
    b = search_d_curve(pi, VMFKernel(10.0), 0.2, ks, n_anchor=24, n_radius=32, n_angle=64, n_cos=192).d
    np.testing.assert_allclose(a, b, rtol=1e-8)


def test_search_d_curve_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="'pi' must be Uniform or VonMisesFisher"):
        search_d_curve(VMFMixture(np.ones(2) / 2, np.eye(8)[:2], np.array([2.0, 2.0])), VMFKernel(10.0), 0.2, [1])
    with pytest.raises(ValueError, match="'tau'"):
        search_d_curve(Uniform(3), VMFKernel(10.0), 0.0, [1])
    with pytest.raises(ValueError, match="'ks'"):
        search_d_curve(Uniform(3), VMFKernel(10.0), 0.1, [0])
    with pytest.raises(ValueError, match="'m' must be finite and > 0"):
        snis_bias([[0.0, 1.0]], [[1.0, 2.0]], [[0.5, 0.5]], [2])
