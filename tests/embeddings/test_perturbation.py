"""Perturbations of an embedding (simkit.embeddings.perturbation): the parameter perturbation's size and
determinism, and the bump psi (CapBump): the cap holds the stated pi-mass (quadrature), psi = phi off
the cap, the displacement at the centre is 2 sin(atan(a)/2); invalid inputs. All deterministic.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from simkit.embeddings.embedding import LinearEmbedding, TwoLayerEmbedding
from simkit.embeddings.perturbation import CapBump, cap_cosine, perturb


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def test_perturb_distance_and_determinism():
    phi = LinearEmbedding.random(4, 6, rng=0)
    psi = perturb(phi, 0.2, rng=1)
    assert np.linalg.norm(psi.params - phi.params) == pytest.approx(0.2 * np.linalg.norm(phi.params), rel=1e-12)
    np.testing.assert_array_equal(psi.params, perturb(phi, 0.2, rng=1).params)
    np.testing.assert_array_equal(perturb(phi, 0.0, rng=1).params, phi.params)


def test_perturb_invalid_inputs():
    with pytest.raises(ValueError, match="'eps' must be a finite number >= 0"):
        perturb(LinearEmbedding.identity(3), -0.1, rng=0)
    with pytest.raises(ValueError, match="'rng' is required"):
        perturb(LinearEmbedding.identity(3), 0.1, rng=None)
    with pytest.raises(TypeError, match="rng"):
        perturb(LinearEmbedding.identity(3), 0.1)  # no default: no hidden source of randomness


@pytest.mark.parametrize("p", [3, 5, 16])
def test_cap_cosine_holds_the_stated_mass(p):
    """P(x.c >= t) for x uniform on S^{p-1}: the density of x.c is prop. to (1 - z^2)^{(p-3)/2} (quadrature)."""
    dens = lambda z: (1 - z * z) ** ((p - 3) / 2)  # noqa: E731
    total = integrate.quad(dens, -1, 1, epsabs=0, epsrel=1e-13)[0]
    for f in (2.0 ** -8, 2.0 ** -6, 0.1, 0.5):
        t = cap_cosine(p, f)
        assert integrate.quad(dens, t, 1, epsabs=0, epsrel=1e-13)[0] / total == pytest.approx(f, rel=1e-9)
    assert cap_cosine(3, 2.0 ** -6) == pytest.approx(1 - 2 * 2.0 ** -6, abs=1e-14)


def _bump(fraction=2.0 ** -4, amplitudes=(0.04, 0.4, 2.0), seed=11):
    phi = TwoLayerEmbedding.random(3, 16, 32, rng=seed)
    return phi, CapBump.random(phi, 3, fraction, list(amplitudes), rng=seed + 1)


def test_cap_bump_is_local_and_has_the_stated_displacement():
    phi, psis = _bump()
    rng = np.random.default_rng(12)
    x = _unit(rng.standard_normal((20000, 3)))
    inside = x @ psis[0].centre >= psis[0].cos_radius
    assert inside.any() and (~inside).any()  # the cap's mass is checked exactly (quadrature) above
    for psi in psis:
        # psi = phi off the cap, up to the rounding of one renormalisation of a unit vector
        np.testing.assert_allclose(psi(x[~inside]), phi(x[~inside]), rtol=0, atol=1e-15)
        moved = np.linalg.norm(psi(x[inside]) - phi(x[inside]), axis=1)
        assert np.all(moved > 0) and np.all(moved <= 2)
        c = psi.centre[None, :]
        assert np.linalg.norm(psi(c) - phi(c)) == pytest.approx(2 * np.sin(np.arctan(psi.amplitude) / 2), rel=1e-12)
        assert abs(psi.direction @ phi(c)[0]) < 1e-12  # e orthogonal to phi(c)
        np.testing.assert_allclose(np.linalg.norm(psi(x), axis=1), 1.0, rtol=0, atol=1e-14)
    # the same seed gives the same bump
    np.testing.assert_array_equal(_bump()[1][2](x[:50]), psis[2](x[:50]))


def test_cap_bump_invalid_inputs():
    phi = TwoLayerEmbedding.random(3, 4, 5, rng=0)
    c, e = np.array([1.0, 0, 0]), np.array([0, 1.0, 0, 0])
    with pytest.raises(ValueError, match="'centre' must be a unit vector"):
        CapBump(phi, [1.0, 1.0, 0], 0.9, 1.0, e)
    with pytest.raises(ValueError, match="'direction' must be a unit vector"):
        CapBump(phi, c, 0.9, 1.0, [1.0, 1.0, 0, 0])
    with pytest.raises(ValueError, match="'cos_radius' must be a number in"):
        CapBump(phi, c, 1.0, 1.0, e)
    with pytest.raises(ValueError, match="'amplitude' must be a finite number >= 0"):
        CapBump(phi, c, 0.9, -1.0, e)
    with pytest.raises(ValueError, match="'fraction' must be a number in"):
        cap_cosine(3, 0.7)
    with pytest.raises(ValueError, match="'rng' is required"):
        CapBump.random(phi, 3, 0.1, [1.0], rng=None)
