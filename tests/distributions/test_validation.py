"""Argument validation of the public sphere API: every invalid argument raises ``ValueError`` whose
message names the argument in quotes and states the constraint (HOUSE.md, "Errors").

Bad values are generated with hypothesis (derandomized, no example database, so every run checks
the same examples and nothing is written to the working tree); a few good-input properties check
that validation does not reject or distort valid input. The tests at the end were strict xfails
documenting gaps in the library's validation; the library has been fixed and they are now
ordinary regression tests. One gap test (``test_gap_discrete_no_atoms``) is still marked: see
the comment above it.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from simkit import (Discrete, GeodesicRandomWalk, RotatedVMFKernel, Uniform, VMFKernel,
                    VMFMixture, VonMisesFisher)

SETTINGS = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

KAPPA_MAX = 1e6
# Unit-norm tolerance of the good-input properties. Loose on purpose: these tests are about
# validation; the sampler's precision (unit norm to 1e-14, including d = 2, 3 with a generic mean
# direction) is tested in test_sphere_sampling.py::test_vmf_unit_norm_generic_mu.
UNIT_ATOL = 1e-8


def raises(name: str, constraint: str):
    """``pytest.raises(ValueError)`` whose message starts with the quoted argument name followed
    (anywhere later) by the constraint regex."""
    return pytest.raises(ValueError, match=rf"'{name}'.*{constraint}")


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------

dims = st.integers(min_value=2, max_value=64)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
moderate = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False, allow_infinity=False)


def unit(seed: int, d: int) -> np.ndarray:
    g = np.random.default_rng(seed).standard_normal(d)
    return g / np.linalg.norm(g)


def rotation(seed: int, d: int, det: float = 1.0) -> np.ndarray:
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    q = q * np.sign(np.diag(r))
    if np.sign(np.linalg.det(q)) != det:
        q[:, 0] = -q[:, 0]
    return q


# kappa values outside [0, 1e6] or not finite, with the constraint each must report
bad_kappas = st.one_of(
    st.floats(max_value=0.0, exclude_max=True, allow_infinity=False, allow_nan=False).map(
        lambda v: (v, r">= 0")),
    st.floats(min_value=KAPPA_MAX, exclude_min=True, allow_infinity=False, allow_nan=False).map(
        lambda v: (v, r"<= 1000000")),
    st.sampled_from([np.nan, np.inf, -np.inf, np.float32(np.nan), np.float64(np.inf)]).map(
        lambda v: (v, r"finite")),
    st.one_of(st.text(max_size=5), st.none(), st.booleans(), st.complex_numbers(),
              st.lists(st.floats(0, 10), min_size=1, max_size=3)).map(
        lambda v: (v, r"(real number|scalar)")),
)

valid_kappas = st.one_of(st.floats(min_value=0.0, max_value=KAPPA_MAX), st.sampled_from([0.0, 1e-300, KAPPA_MAX]))


@st.composite
def non_unit_vectors(draw, d=None):
    """A finite vector of length d whose norm differs from 1 by more than the 1e-6 tolerance."""
    d = draw(dims) if d is None else d
    kind = draw(st.sampled_from(["scaled", "raw", "zero"]))
    if kind == "zero":
        return np.zeros(d)
    if kind == "raw":
        v = draw(hnp.arrays(np.float64, d, elements=moderate))
    else:
        scale = draw(st.one_of(st.floats(min_value=1e-100, max_value=1 - 2e-6),
                               st.floats(min_value=1 + 2e-6, max_value=1e100)))
        v = scale * unit(draw(seeds), d)
    assume(abs(np.sqrt(np.sum(v * v)) - 1.0) > 2e-6)
    return v


@st.composite
def with_non_finite(draw, arr: np.ndarray):
    a = np.array(arr, dtype=float, copy=True)
    idx = draw(st.integers(0, a.size - 1))
    a.flat[idx] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return a


@st.composite
def bad_weights(draw):
    """(m, weights, constraint regex) for mixtures of m components."""
    m = draw(st.integers(1, 6))
    v = draw(hnp.arrays(np.float64, m, elements=st.floats(min_value=0.01, max_value=10.0)))
    w = v / v.sum()
    kind = draw(st.sampled_from(["sum", "negative", "length", "nonfinite", "shape"]))
    if kind == "sum":
        delta = draw(st.one_of(st.floats(1e-6, 10.0), st.floats(-0.99, -1e-6)))
        return m, w * (1.0 + delta), r"must sum to 1"
    if kind == "negative":
        assume(m >= 2)
        c = draw(st.floats(min_value=1e-6, max_value=5.0))
        w = w.copy()
        shift = w[0] + c
        w[0] -= shift
        w[1] += shift
        return m, w, r"must be >= 0"
    if kind == "length":
        k = draw(st.integers(1, 3))
        n = m + k if draw(st.booleans()) or m <= k else m - k
        return m, np.full(n, 1.0 / n), rf"must have length {m}"
    if kind == "nonfinite":
        return m, draw(with_non_finite(w)), r"finite"
    return m, draw(st.sampled_from([np.empty(0), w[None, :], np.float64(1.0)])), r"non-empty 1-D"


bad_rngs = st.one_of(
    st.text(max_size=5), st.floats(), st.integers(max_value=-1),
    st.lists(st.integers(max_value=-1), min_size=1, max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from([object(), np.random.RandomState(0), b"seed", [1.5], np.array([0.5]), np.int8(-1)]),
)


# --------------------------------------------------------------------------------------------
# kappa, mu, dim
# --------------------------------------------------------------------------------------------

@SETTINGS
@given(bad=bad_kappas, d=dims)
def test_bad_kappa_vmf(bad, d):
    value, constraint = bad
    mu = np.zeros(d)
    mu[0] = 1.0
    with raises("kappa", constraint):
        VonMisesFisher(mu, value)


@SETTINGS
@given(bad=bad_kappas)
def test_bad_kappa_kernels(bad):
    value, constraint = bad
    with raises("kappa", constraint):
        VMFKernel(value)
    with raises("kappa", constraint):
        RotatedVMFKernel(np.eye(3), value)


@SETTINGS
@given(bad=bad_kappas, j=st.integers(0, 2))
def test_bad_kappa_in_mixture(bad, j):
    """Mixture kappas are checked one by one and the message names the element, 'kappas[j]'."""
    value, constraint = bad
    assume(np.ndim(value) == 0 and isinstance(value, (int, float, np.floating)) and not isinstance(value, bool))
    kappas = [1.0, 2.0, 3.0]
    kappas[j] = value
    with pytest.raises(ValueError, match=rf"'kappas\[{j}\]'.*{constraint}"):
        VMFMixture([0.2, 0.3, 0.5], np.eye(3), kappas)


@SETTINGS
@given(mu=non_unit_vectors(), kappa=valid_kappas)
def test_non_unit_mu(mu, kappa):
    with raises("mu", "unit vectors"):
        VonMisesFisher(mu, kappa)


@SETTINGS
@given(data=st.data(), d=dims, seed=seeds)
def test_non_finite_mu_and_mus(data, d, seed):
    mu = data.draw(with_non_finite(unit(seed, d)))
    with raises("mu", "finite"):
        VonMisesFisher(mu, 1.0)
    mus = np.stack([unit(seed + 1, d), mu])
    with raises("mus", "finite"):
        VMFMixture([0.5, 0.5], mus, [1.0, 1.0])
    with raises("points", "finite"):
        Discrete(mus)


@SETTINGS
@given(d=dims, seed=seeds, m=st.integers(1, 4))
def test_mu_wrong_shape(d, seed, m):
    mu = unit(seed, d)
    with raises("mu", "1-D"):
        VonMisesFisher(np.tile(mu, (m, 1)), 1.0)
    with raises("mu", "at least 1 dimension"):
        VonMisesFisher(1.0, 1.0)
    with raises("mu", "length >= 2"):
        VonMisesFisher([1.0], 1.0)


@pytest.mark.parametrize("dim, constraint", [(1, ">= 2"), (0, ">= 2"), (-3, ">= 2"), (2.5, "integer"),
                                             (np.nan, "integer"), (np.inf, "integer"), (True, "integer"),
                                             ("3", "integer"), (None, "integer"), (np.array(3), "integer")])
def test_bad_dim_examples(dim, constraint):
    with raises("dim", constraint):
        Uniform(dim)


@SETTINGS
@given(dim=st.one_of(st.integers(max_value=1).map(lambda v: (v, ">= 2")),
                     st.floats(allow_nan=True, allow_infinity=True).filter(
                         lambda v: not (np.isfinite(v) and float(v).is_integer())).map(lambda v: (v, "integer"))))
def test_bad_dim(dim):
    value, constraint = dim
    with raises("dim", constraint):
        Uniform(value)


# --------------------------------------------------------------------------------------------
# Weights, mixture and discrete shapes
# --------------------------------------------------------------------------------------------

@SETTINGS
@given(case=bad_weights(), seed=seeds)
def test_bad_weights(case, seed):
    m, w, constraint = case
    d = 3
    mus = np.stack([unit(seed + j, d) for j in range(m)])
    with raises("weights", constraint):
        VMFMixture(w, mus, np.ones(m))
    with raises("weights", constraint):
        Discrete(mus, w)


@SETTINGS
@given(d=dims, seed=seeds, m=st.integers(1, 5), extra=st.integers(1, 3))
def test_mixture_shapes(d, seed, m, extra):
    mus = np.stack([unit(seed + j, d) for j in range(m)])
    w = np.full(m, 1.0 / m)
    with raises("mus", r"shape \(m, d\)"):
        VMFMixture([1.0], mus[0], [1.0])  # 1-D mus
    with raises("mus", r"shape \(m, d\)"):
        VMFMixture(w, mus[None], np.ones(m))  # 3-D mus
    with raises("kappas", rf"length {m}"):
        VMFMixture(w, mus, np.ones(m + extra))
    if m > extra:
        with raises("kappas", rf"length {m}"):
            VMFMixture(w, mus, np.ones(m - extra))
    with raises("kappas", rf"length {m}"):
        VMFMixture(w, mus, np.ones((m, 1)))
    with raises("points", r"shape \(m, d\)"):
        Discrete(mus[0])
    with raises("mus", "unit vectors"):
        VMFMixture(w, 2.0 * mus, np.ones(m))
    with raises("points", "unit vectors"):
        Discrete(0.5 * mus)


# --------------------------------------------------------------------------------------------
# Points passed to logpdf and kernel.sample
# --------------------------------------------------------------------------------------------

def _dists(d: int, seed: int):
    mu = unit(seed, d)
    return [Uniform(d), VonMisesFisher(mu, 2.0), VMFMixture([1.0], mu[None], [2.0])]


@SETTINGS
@given(d=dims, other=dims, seed=seeds, lead=st.integers(0, 3))
def test_logpdf_wrong_last_axis(d, other, seed, lead):
    assume(other != d)
    x = np.ones((lead, other) if lead else (other,)) / np.sqrt(other)
    for dist in _dists(d, seed):
        with raises("x", rf"last axis of length {d}"):
            dist.logpdf(x)
    with raises("x", rf"last axis of length {d}"):
        Discrete(unit(seed, d)[None]).logpmf(x)


@SETTINGS
@given(data=st.data(), d=dims, seed=seeds)
def test_non_finite_points(data, d, seed):
    x = data.draw(with_non_finite(np.stack([unit(seed, d), unit(seed + 1, d)])))
    for dist in _dists(d, seed):
        with raises("x", "finite"):
            dist.logpdf(x)
    for ker in [VMFKernel(1.0), GeodesicRandomWalk(0.1, 2), RotatedVMFKernel(rotation(seed, d), 1.0)]:
        with raises("x", "finite"):
            ker.sample(x, rng=0)
    with raises("y", "finite"):
        VMFKernel(1.0).logpdf(unit(seed, d), x)


@SETTINGS
@given(x=non_unit_vectors())
def test_non_unit_points(x):
    d = x.shape[0]
    with raises("x", "unit vectors"):
        Uniform(d).logpdf(x)
    with raises("x", "unit vectors"):
        VMFKernel(1.0).sample(x, rng=0)
    with raises("x", "unit vectors"):
        GeodesicRandomWalk(0.5, 1).sample(x, rng=0)


@SETTINGS
@given(d=dims, other=dims, seed=seeds)
def test_kernel_sample_wrong_shape(d, other, seed):
    assume(other != d)
    ker = RotatedVMFKernel(rotation(seed, d), 1.0)
    with raises("x", rf"last axis of length {d}.*'rotation'"):
        ker.sample(np.full(other, 1.0 / np.sqrt(other)), rng=0)
    with raises("x", rf"last axis of length {d}"):
        ker.logpdf(np.full(other, 1.0 / np.sqrt(other)), np.full(other, 1.0 / np.sqrt(other)))
    for k in [VMFKernel(1.0), GeodesicRandomWalk(0.5, 2), ker]:
        with raises("x", r"shape \(n, d\) or \(d,\)"):
            k.sample(np.full((2, 2, d), 1.0 / np.sqrt(d)), rng=0)
        with raises("x", "length >= 2"):
            k.sample(np.ones((3, 1)), rng=0)
        with raises("x", "at least 1 dimension"):
            k.sample(1.0, rng=0)
    with raises("y", rf"last axis of length {d}"):
        VMFKernel(1.0).logpdf(unit(seed, d), np.full(other, 1.0 / np.sqrt(other)))


# --------------------------------------------------------------------------------------------
# Rotations and random walks
# --------------------------------------------------------------------------------------------

@SETTINGS
@given(d=st.integers(2, 12), seed=seeds, eps=st.floats(min_value=1e-6, max_value=1.0))
def test_non_orthogonal_rotation(d, seed, eps):
    r = rotation(seed, d)
    r[0, 0] += eps
    with raises("rotation", "orthogonal"):
        RotatedVMFKernel(r, 1.0)
    with raises("rotation", "orthogonal"):
        RotatedVMFKernel(np.random.default_rng(seed).standard_normal((d, d)), 1.0)


@SETTINGS
@given(d=st.integers(2, 12), seed=seeds)
def test_reflection_rejected(d, seed):
    with raises("rotation", r"determinant \+1"):
        RotatedVMFKernel(rotation(seed, d, det=-1.0), 1.0)


@pytest.mark.parametrize("r, constraint", [
    (np.ones((2, 3)), "square"), (np.ones((2, 2, 2)), "square"), ([[1.0]], "d >= 2"), (np.eye(1), "d >= 2"),
    ([[np.nan, 0.0], [0.0, 1.0]], "finite"), ([[np.inf, 0.0], [0.0, 1.0]], "finite"), ("abc", "real"),
    ([[object()]], "real"), (2.0 * np.eye(3), "orthogonal"), (np.diag([1.0, -1.0]), "determinant"),
])
def test_bad_rotation_examples(r, constraint):
    with raises("rotation", constraint):
        RotatedVMFKernel(r, 1.0)


@SETTINGS
@given(step=st.one_of(
    st.floats(max_value=0.0, allow_nan=False, allow_infinity=False).map(lambda v: (v, "> 0")),
    st.floats(min_value=np.pi, exclude_min=True, allow_nan=False, allow_infinity=False).map(lambda v: (v, "<= 3.14159")),
    st.sampled_from([np.nan, np.inf, -np.inf]).map(lambda v: (v, "finite")),
    st.sampled_from(["0.1", None, True, 0.1j]).map(lambda v: (v, "real number")),
))
def test_bad_step(step):
    value, constraint = step
    with raises("step", constraint):
        GeodesicRandomWalk(value, 1)


@SETTINGS
@given(n=st.one_of(st.integers(max_value=0).map(lambda v: (v, ">= 1")),
                   st.floats().filter(lambda v: not (np.isfinite(v) and float(v).is_integer())).map(
                       lambda v: (v, "integer")),
                   st.sampled_from([True, "2", None, np.True_]).map(lambda v: (v, "integer"))))
def test_bad_n_steps(n):
    value, constraint = n
    with raises("n_steps", constraint):
        GeodesicRandomWalk(0.1, value)


# --------------------------------------------------------------------------------------------
# size and rng
# --------------------------------------------------------------------------------------------

ALL_DISTS = [Uniform(3), VonMisesFisher([0.0, 0.0, 1.0], 2.0), VMFMixture([0.5, 0.5], np.eye(3)[:2], [1.0, 2.0]),
             Discrete(np.eye(3))]


@SETTINGS
@given(size=st.one_of(
    st.integers(max_value=-1).map(lambda v: (v, ">= 0")),
    st.tuples(st.integers(0, 3), st.integers(max_value=-1)).map(lambda v: (v, ">= 0")),
    st.floats().filter(lambda v: not (np.isfinite(v) and float(v).is_integer())).map(lambda v: (v, "integer")),
    st.sampled_from(["3", None, True, (2, 1.5), [2, "a"]]).map(lambda v: (v, "integer")),
), which=st.integers(0, len(ALL_DISTS) - 1))
def test_bad_size(size, which):
    value, constraint = size
    with raises("size", constraint):
        ALL_DISTS[which].rvs(value, rng=0)


@SETTINGS
@given(rng=bad_rngs, which=st.integers(0, len(ALL_DISTS) - 1))
def test_bad_rng(rng, which):
    with raises("rng", "Generator"):
        ALL_DISTS[which].rvs(2, rng=rng)
    x = np.eye(3)[:2]
    for ker in [VMFKernel(1.0), RotatedVMFKernel(np.eye(3), 1.0), GeodesicRandomWalk(0.3, 2)]:
        with raises("rng", "Generator"):
            ker.sample(x, rng=rng)


def test_random_state_message_suggests_fix():
    with raises("rng", "legacy RandomState is not supported"):
        Uniform(3).rvs(2, rng=np.random.RandomState(0))


# --------------------------------------------------------------------------------------------
# Good input: accepted, finite and unit-norm
# --------------------------------------------------------------------------------------------

@SETTINGS
@given(d=dims, seed=seeds, kappa=valid_kappas, tweak=st.floats(min_value=-9e-7, max_value=9e-7))
def test_valid_vmf(d, seed, kappa, tweak):
    """Any kappa in [0, 1e6] and mu of norm within the 1e-6 tolerance: mu is renormalised, logpdf
    is finite and samples are unit vectors."""
    dist = VonMisesFisher((1.0 + tweak) * unit(seed, d), kappa)
    assert abs(np.linalg.norm(dist.mu) - 1.0) < 1e-15
    x = dist.rvs(16, rng=seed)
    assert x.shape == (16, d)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=0, atol=UNIT_ATOL)
    lp = dist.logpdf(np.concatenate([x, dist.mu[None], -dist.mu[None]]))
    assert np.all(np.isfinite(lp))
    assert lp[-2] >= lp[-1]  # the mode is at mu


@SETTINGS
@given(d=dims, seed=seeds, m=st.integers(1, 5), data=st.data())
def test_valid_mixture_and_discrete(d, seed, m, data):
    raw = data.draw(hnp.arrays(np.float64, m, elements=st.floats(0.0, 1.0)))
    assume(raw.sum() > 0.1)
    w = raw / raw.sum()
    kappas = data.draw(hnp.arrays(np.float64, m, elements=st.floats(0.0, KAPPA_MAX)))
    mus = np.stack([unit(seed + j, d) for j in range(m)])
    mix = VMFMixture(w, mus, kappas)
    np.testing.assert_allclose(mix.weights.sum(), 1.0, rtol=1e-15)
    x = mix.rvs(8, rng=seed)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=0, atol=UNIT_ATOL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # zero weights: see test_sphere_sampling.py::test_mixture_logpdf_zero_weight
        assert np.all(np.isfinite(mix.logpdf(x)))
    dis = Discrete(mus, w)
    y = dis.rvs(8, rng=seed)
    assert np.all(np.any(np.all(y[:, None, :] == dis.points[None], axis=2), axis=1))  # every draw is an atom


@SETTINGS
@given(d=dims, seed=seeds, kappa=valid_kappas, step=st.floats(min_value=1e-9, max_value=np.pi),
       n_steps=st.integers(1, 10))
def test_valid_kernels(d, seed, kappa, step, n_steps):
    x = np.stack([unit(seed + j, d) for j in range(4)])
    for ker in [VMFKernel(kappa), RotatedVMFKernel(rotation(seed, d), kappa), GeodesicRandomWalk(step, n_steps)]:
        y = ker.sample(x, rng=seed)
        assert y.shape == x.shape
        np.testing.assert_allclose(np.linalg.norm(y, axis=1), 1.0, rtol=0, atol=UNIT_ATOL)
    assert np.all(np.isfinite(VMFKernel(kappa).logpdf(x, y)))


def test_boundary_values_accepted():
    VonMisesFisher([1.0, 0.0], 0.0)
    VonMisesFisher([1.0, 0.0], KAPPA_MAX)
    GeodesicRandomWalk(np.pi, 1)
    Uniform(2.0)  # an integral float is an integer
    Uniform(np.int64(5))
    Discrete(np.eye(2), [0.5, 0.5 + 5e-10])  # sum within 1e-9


# --------------------------------------------------------------------------------------------
# Regression tests for formerly missing validation (each was a strict xfail until the library
# was fixed; the failure it documented is stated in its docstring).
# --------------------------------------------------------------------------------------------

def test_mixture_kappas_non_numeric_string():
    """VMFMixture once passed kappas=['a'] to np.asarray(dtype=float), whose 'could not convert
    string to float' did not name 'kappas'."""
    with raises("kappas", "real"):
        VMFMixture([1.0], [[1.0, 0.0, 0.0]], ["a"])


@pytest.mark.parametrize("kappas", [[object()], [1 + 1j]], ids=["object", "complex"])
def test_mixture_kappas_type_error(kappas):
    """kappas=[object()] or [1+1j] once raised TypeError from np.asarray."""
    with raises("kappas", "real"):
        VMFMixture([1.0], [[1.0, 0.0, 0.0]], kappas)


def test_kernel_logpdf_shapes():
    """MarkovKernel.logpdf once let numpy report 'operands could not be broadcast together',
    naming neither argument."""
    x = np.tile([1.0, 0.0, 0.0], (3, 1))
    y = np.tile([0.0, 1.0, 0.0], (4, 1))
    with pytest.raises(ValueError, match=r"'x'.*'y'|'y'.*'x'"):
        VMFKernel(1.0).logpdf(x, y)


def test_plane_rotation_axes():
    """RotatedVMFKernel.plane_rotation once raised IndexError for out-of-range axes."""
    with raises("axes", ""):
        RotatedVMFKernel.plane_rotation(3, 0.5, 1.0, axes=(0, 5))


@pytest.mark.parametrize("d", [0, 2.5])
def test_mean_cosine_dim(d):
    """VMFKernel.mean_cosine(d) once emitted a divide-by-zero RuntimeWarning for d = 0 and
    returned a number for d = 2.5."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with raises("d", ""):
            VMFKernel(1e-7).mean_cosine(d)


@pytest.mark.parametrize("mu", [[1e200, 1e200, 0.0], np.array([1.0 + 1.0j, 0.0, 0.0])], ids=["huge", "complex"])
def test_points_overflow_and_complex(mu):
    """check_points once squared the input outside np.errstate (entries above ~1e154 overflowed
    with a RuntimeWarning before the 'unit vectors' ValueError) and cast complex arrays to real
    with a ComplexWarning instead of rejecting them."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with raises("mu", "unit vectors|real"):
            VonMisesFisher(mu, 1.0)


@pytest.mark.parametrize("case", ["kappa=np.True_", "kappa=np.array('1.0')", "rng=True"])
def test_bool_like_rejected(case):
    """Bools and strings are rejected consistently: check_scalar once accepted np.True_ and 0-d
    string arrays, and check_rng accepted rng=True as seed 1 (check_int always rejected bools)."""
    mu = [1.0, 0.0, 0.0]
    if case == "kappa=np.True_":
        with raises("kappa", "real number"):
            VonMisesFisher(mu, np.True_)
    elif case == "kappa=np.array('1.0')":
        with raises("kappa", "real number"):
            VonMisesFisher(mu, np.array("1.0"))
    else:
        with raises("rng", "Generator"):
            Uniform(3).rvs(1, rng=True)


def test_discrete_no_atoms():
    """Zero atoms used to divide by zero before validation; now a ValueError naming 'points'."""
    with raises("points", "non-empty|at least one"):
        Discrete(np.empty((0, 3)))
