"""Trainable embeddings, the empirical InfoNCE risk and its gradient, the trainer, and the population
quantities of a trained embedding (simkit.embeddings.embedding, simkit.embeddings.training, simkit.estimators.population).

Exact tests: the analytic gradient against central finite differences (1e-6 relative, both families,
independent and shared negatives, several (p, d, k, tau)); the jitted risk against its NumPy
reference (1e-12); the loss for phi = identity against ``simkit.estimators.infonce.infonce_losses`` (1e-12);
bit-reproducibility across thread counts; trainer determinism; argument checks.

Statistical tests (fixed seeds, chosen before the tests were first run and never changed):

==========================================================  =====================  ==========
test                                                        checks                 rate
==========================================================  =====================  ==========
test_identity_population_matches_exact                      3 z-tests at 4.5 SE    2.0e-5
test_pool_agrees_with_quadrature_and_bias_is_negligible     1 z-test at 4.5 SE     6.8e-6
test_exact_discrete_agrees_with_pool                        1 z-test at 4.5 SE     6.8e-6
test_trained_linear_embedding_is_orthogonal_up_to_scale     4 models, rho >= 0.9   1.4e-5
test_trained_cross_entropy_approaches_minus_mi              12 one-sided 4.5 SE    4.1e-5
                                                            + ordering, level      5e-5
==========================================================  =====================  ==========

Suite budget of this file: about 1.4e-4. The two training tests' rates come from a pilot of 20
independent training replicates per n (other seeds; numbers in their docstrings).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from simkit import Discrete, Uniform, VMFKernel, exact
from simkit._jit import training as _jit
from simkit.embeddings.embedding import NORM_FLOOR, LinearEmbedding, TwoLayerEmbedding
from simkit.estimators.infonce import infonce_losses
from simkit.estimators.population import generalisation, population
from simkit.exact.quadrature import log_partition
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, _reference_value_and_grad, train

statistical = pytest.mark.statistical

# the setting of the trainer tests: uniform pi on S^2, M = vMF(x, 8), tau = 1/8, so Q = M exactly
# for any phi with phi(x).phi(y) = x.y and CE = -I(x; x+) there (docs/theory.md section 4)
KAPPA = 8.0
TAU = 1.0 / KAPPA
PI3 = Uniform(3)
M8 = VMFKernel(KAPPA)
MI = exact.mutual_information(M8, 3)


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _family(name, p, d, rng):
    if name == "linear":
        return LinearEmbedding.random(p, d, rng=rng)
    return TwoLayerEmbedding.random(p, d, 6, rng=rng)


# ----------------------------------------------------------------------------------------------
# embeddings


@pytest.mark.parametrize("family", ["linear", "two-layer"])
def test_embedding_shapes_params_and_immutability(family):
    rng = np.random.default_rng(1)
    phi = _family(family, 3, 4, rng)
    x = PI3.rvs(7, rng=rng)
    out = phi(x)
    assert out.shape == (7, 4)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_allclose(phi(x[2]), out[2], rtol=0, atol=1e-15)
    # flat vector round trip and the documented layout
    again = phi.with_params(phi.params)
    np.testing.assert_array_equal(again(x), out)
    if family == "linear":
        np.testing.assert_array_equal(phi.params, phi.W.ravel())
        assert phi.n_params == 12
    else:
        np.testing.assert_array_equal(phi.params, np.concatenate([phi.W1.ravel(), phi.b1, phi.W2.ravel()]))
        assert phi.n_params == TwoLayerEmbedding.n_params_for(3, 4, 6) == 6 * 3 + 6 + 4 * 6
    with pytest.raises(AttributeError, match="immutable"):
        phi.p = 5
    with pytest.raises(ValueError, match="read-only"):
        phi.params[0] = 1.0
    # seeded initialisation is reproducible
    a = _family(family, 3, 4, np.random.default_rng(5))
    b = _family(family, 3, 4, np.random.default_rng(5))
    np.testing.assert_array_equal(a.params, b.params)


def test_linear_identity_and_isometry():
    rng = np.random.default_rng(2)
    x = PI3.rvs(20, rng=rng)
    np.testing.assert_allclose(LinearEmbedding.identity(3)(x), x, rtol=0, atol=2e-16)
    q = np.linalg.qr(rng.standard_normal((5, 3)))[0] * 2.5  # an isometry R^3 -> R^5, scaled
    phi = LinearEmbedding(q)
    np.testing.assert_allclose(phi(x) @ phi(x).T, x @ x.T, atol=1e-14)
    assert phi.lipschitz_input_bound() == pytest.approx(1.0, abs=1e-12)


def test_linear_lipschitz_bound_holds():
    rng = np.random.default_rng(3)
    phi = LinearEmbedding.random(3, 4, rng=rng)
    x, y = PI3.rvs(2000, rng=rng), PI3.rvs(2000, rng=rng)
    ratio = np.linalg.norm(phi(x) - phi(y), axis=1) / np.linalg.norm(x - y, axis=1)
    assert np.max(ratio) <= phi.lipschitz_input_bound() * (1 + 1e-12)


@pytest.mark.parametrize("family", ["linear", "two-layer"])
def test_vjp_matches_finite_differences(family):
    """The NumPy backward pass (reference of the jitted one) against central differences of phi."""
    rng = np.random.default_rng(4)
    phi = _family(family, 3, 4, rng)
    x = PI3.rvs(5, rng=rng)
    g = rng.standard_normal((5, 4))
    got = phi.vjp(x, g)
    th = phi.params.copy()
    fd = np.empty_like(th)
    h = 1e-6
    for i in range(th.size):
        e = np.zeros_like(th)
        e[i] = h
        fd[i] = (np.sum(g * phi.with_params(th + e)(x)) - np.sum(g * phi.with_params(th - e)(x))) / (2 * h)
    assert np.max(np.abs(fd - got)) <= 1e-7 * np.max(np.abs(got))


@pytest.mark.parametrize("family", ["linear", "two-layer"])
def test_jitted_forward_matches_numpy(family):
    """simkit._jit.training.embed_points (transposed weights, vectorised tanh) against phi(x)."""
    rng = np.random.default_rng(6)
    phi = _family(family, 3, 5, rng)
    y = PI3.rvs(100, rng=rng)
    y.flags.writeable = False  # the array type of the training path: no extra compilation
    fam, theta, p, d, m, _ = phi._jit_args()
    out, nrm = np.empty((100, d)), np.empty(100)
    hid, mins = np.empty((100, max(m, 1))), np.empty(_jit.n_chunks(100))
    _jit.embed_points(fam, theta, _jit.transposed_weights(fam, theta, p, d, m), p, d, m, y, out, nrm, hid, mins)
    np.testing.assert_allclose(out, phi(y), rtol=0, atol=1e-15)
    np.testing.assert_allclose(nrm, np.linalg.norm(phi.raw(y), axis=1), rtol=1e-14)
    if family == "two-layer":
        np.testing.assert_allclose(hid, np.tanh(y @ phi.W1.T + phi.b1), rtol=0, atol=4e-16)
    assert np.min(mins) == np.min(nrm)


def test_embedding_errors():
    with pytest.raises(ValueError, match="'W' must have at least as many rows as columns"):
        LinearEmbedding(np.ones((2, 3)))
    with pytest.raises(ValueError, match="'W' must have full column rank"):
        LinearEmbedding([[1.0, 2.0], [2.0, 4.0], [0.0, 0.0]])
    with pytest.raises(ValueError, match="'W' must be finite"):
        LinearEmbedding([[1.0, np.nan], [0.0, 1.0]])
    with pytest.raises(ValueError, match="'W' must be a 2-D array"):
        LinearEmbedding(np.eye(3)[0])
    with pytest.raises(ValueError, match="'theta' must have length 6"):
        LinearEmbedding.from_vector(np.ones(5), 2, 3)
    with pytest.raises(ValueError, match="'d' must be >= 3"):
        LinearEmbedding.random(3, 2, rng=0)
    with pytest.raises(ValueError, match="'b1' must have shape"):
        TwoLayerEmbedding(np.ones((4, 3)), np.ones(3), np.ones((2, 4)))
    with pytest.raises(ValueError, match="'W2' must not be all zeros"):
        TwoLayerEmbedding(np.ones((4, 3)), np.ones(4), np.zeros((2, 4)))
    with pytest.raises(ValueError, match="'hidden' must be >= 1"):
        TwoLayerEmbedding.random(3, 2, 0, rng=0)
    phi = LinearEmbedding.identity(3)
    with pytest.raises(ValueError, match="'x' must have last axis of length 3"):
        phi(np.array([[1.0, 0.0]]))
    with pytest.raises(ValueError, match="'x' must contain unit vectors"):
        phi(np.array([[1.0, 1.0, 0.0]]))
    # h(x) = W2 tanh(W1 x + b1) vanishes where W1 x = 0 if b1 = 0: phi undefined there
    two = TwoLayerEmbedding([[1.0, 0.0, 0.0]], [0.0], [[1.0], [2.0]])
    with pytest.raises(ValueError, match="'x' contains a point .* where the embedding's raw output h"):
        two(np.array([[0.0, 1.0, 0.0]]))
    assert NORM_FLOOR > 0


# ----------------------------------------------------------------------------------------------
# the empirical risk: value and gradient

GRAD_CASES = [
    # (family, p, d, k, tau)
    ("linear", 2, 2, 1, 1.0),
    ("linear", 3, 3, 8, 0.125),
    ("linear", 3, 16, 32, 0.5),
    ("linear", 5, 7, 16, 0.05),
    ("two-layer", 3, 3, 8, 0.125),
    ("two-layer", 3, 16, 16, 0.5),
    ("two-layer", 5, 2, 4, 0.05),  # d < p: only the nonlinear family allows it
]


def _fd_grad(risk, phi, h=1e-5):
    """Central differences with one Richardson step, (4 D(h/2) - D(h)) / 3: truncation O(h^4 f^(5))
    instead of O(h^2 f^(3)); the plain central difference reached ~2e-5 relative error at tau = 0.05
    for some samples, where the analytic gradient agreed with the NumPy reference to 1e-12."""
    th = phi.params.copy()
    out = np.empty_like(th)

    def central(i, step):
        e = np.zeros_like(th)
        e[i] = step
        return (risk.value(phi.with_params(th + e)) - risk.value(phi.with_params(th - e))) / (2 * step)

    for i in range(th.size):
        out[i] = (4.0 * central(i, 0.5 * h) - central(i, h)) / 3.0
    return out


@pytest.mark.parametrize("shared", [False, True], ids=["independent", "shared"])
@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: "-".join(map(str, c)))
def test_gradient_matches_central_differences(case, shared):
    """max_i |g_i - fd_i| <= 1e-6 max_i |g_i|. Error budget of the Richardson-extrapolated central
    difference with h = 1e-5 (``_fd_grad``): truncation O(h^4 |f^(5)|) plus rounding ~eps |f| / h ~
    1e-10; measured: at most 3e-9 relative over these cases, tau = 0.05 included."""
    family, p, d, k, tau = case
    rng = np.random.default_rng(10 + GRAD_CASES.index(case))
    phi = _family(family, p, d, rng)
    sample = TrainingSample.draw(Uniform(p), VMFKernel(4.0), 24, k, rng=rng, shared=shared)
    risk = EmpiricalRisk(sample, tau)
    f, g = risk.value_and_grad(phi)
    fd = _fd_grad(risk, phi)
    assert np.max(np.abs(g - fd)) <= 1e-6 * np.max(np.abs(g))
    assert f == risk.value(phi)


@pytest.mark.parametrize("shared", [False, True], ids=["independent", "shared"])
@pytest.mark.parametrize("family", ["linear", "two-layer"])
@pytest.mark.deterministic(reason="gradient against central differences and a reference implementation on one draw (rtol 1e-6, 1e-12)")
def test_weighted_risk_gradient(family, shared):
    """Per-tuple weights (Rademacher signs): value (1/n) sum w_i l_i, gradient against central
    differences (1e-6) and the NumPy reference (1e-12)."""
    rng = np.random.default_rng(25)
    phi = _family(family, 3, 4, rng)
    sample = TrainingSample.draw(PI3, M8, 40, 6, rng=rng, shared=shared)
    sigma = rng.choice([-1.0, 1.0], size=40)
    risk = EmpiricalRisk(sample, 0.25, weights=sigma)
    f, g = risk.value_and_grad(phi)
    assert f == pytest.approx(np.mean(sigma * risk.losses(phi)), abs=1e-15)
    fd = _fd_grad(risk, phi)
    assert np.max(np.abs(g - fd)) <= 1e-6 * np.max(np.abs(g))
    _, ref_g = _reference_value_and_grad(phi, sample, 0.25, sigma)
    assert np.max(np.abs(g - ref_g)) <= 1e-12 * np.max(np.abs(ref_g))
    with pytest.raises(ValueError, match=r"'weights' must have shape \(n,\) = \(40,\)"):
        EmpiricalRisk(sample, 0.25, weights=np.ones(3))


def test_softmax_weights():
    """Rows sum to 1; the loss is -log p_i0; with shared negatives, equal to the weights of a direct
    computation."""
    rng = np.random.default_rng(26)
    phi = TwoLayerEmbedding.random(3, 4, 5, rng=rng)
    for shared in (False, True):
        risk = EmpiricalRisk(TrainingSample.draw(PI3, M8, 30, 9, rng=rng, shared=shared), 0.2)
        p = risk.softmax_weights(phi)
        assert p.shape == (30, 10)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-14)
        np.testing.assert_allclose(-np.log(p[:, 0]), risk.losses(phi), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("shared", [False, True], ids=["independent", "shared"])
@pytest.mark.parametrize("family", ["linear", "two-layer"])
def test_jit_matches_numpy_reference(family, shared):
    rng = np.random.default_rng(20)
    phi = _family(family, 3, 5, rng)
    sample = TrainingSample.draw(PI3, M8, 77, 40, rng=rng, shared=shared)  # 77: not a multiple of CHUNK
    for tau in (1e-3, 0.1, 2.0):  # tau = 1e-3: scores up to 1000, safe by the max shift
        risk = EmpiricalRisk(sample, tau)
        losses = risk.losses(phi)
        f, g = risk.value_and_grad(phi)
        ref_l, ref_g = _reference_value_and_grad(phi, sample, tau)
        # scores are O(1/tau) and carry a few ulp of phi (the jitted tanh is accurate to ~2e-16
        # absolute, NumPy's to 1 ulp), so losses agree to ~1e-13 / tau
        tol = 1e-13 * max(1.0, 1.0 / tau)
        np.testing.assert_allclose(losses, ref_l, rtol=0, atol=tol)
        assert abs(f - ref_l.mean()) <= tol
        assert np.max(np.abs(g - ref_g)) <= 1e-12 * np.max(np.abs(ref_g))
        assert np.all(np.isfinite(g))


def test_identity_loss_equals_infonce_losses():
    """phi = identity (W = I): per-tuple losses equal simkit.estimators.infonce.infonce_losses to 1e-12."""
    rng = np.random.default_rng(30)
    phi = LinearEmbedding.identity(3)
    for tau in (0.05, 0.125, 1.0):
        sample = TrainingSample.draw(PI3, M8, 50, 37, rng=rng, shared=True)
        got = EmpiricalRisk(sample, tau).losses(phi)
        ref = infonce_losses(sample.x, sample.x_pos, sample.negatives, tau, [37])[:, 0]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)
        sample = TrainingSample.draw(PI3, M8, 20, 37, rng=rng)
        got = EmpiricalRisk(sample, tau).losses(phi)
        ref = [infonce_losses(sample.x[i:i + 1], sample.x_pos[i:i + 1], sample.negatives[i], tau, [37])[0, 0]
               for i in range(20)]
        np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shared", [False, True], ids=["independent", "shared"])
def test_risk_bit_identical_across_thread_counts(shared):
    rng = np.random.default_rng(40)
    phi = TwoLayerEmbedding.random(3, 4, 5, rng=rng)
    risk = EmpiricalRisk(TrainingSample.draw(PI3, M8, 1000, 50, rng=rng, shared=shared), 0.2)
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        f1, g1 = risk.value_and_grad(phi)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        f2, g2 = risk.value_and_grad(phi)
    finally:
        numba.set_num_threads(before)
    assert f1 == f2
    np.testing.assert_array_equal(g1, g2)


def test_scale_invariance_of_linear_risk():
    """phi_{cW} = phi_W: same risk, gradient scaled by 1/c and orthogonal to W."""
    rng = np.random.default_rng(41)
    phi = LinearEmbedding.random(3, 4, rng=rng)
    risk = EmpiricalRisk(TrainingSample.draw(PI3, M8, 64, 8, rng=rng), 0.3)
    f1, g1 = risk.value_and_grad(phi)
    f2, g2 = risk.value_and_grad(phi.with_params(3.0 * phi.params))
    assert f1 == pytest.approx(f2, abs=1e-14)
    np.testing.assert_allclose(g2, g1 / 3.0, atol=1e-14)
    assert abs(g1 @ phi.params) <= 1e-13 * np.linalg.norm(g1) * np.linalg.norm(phi.params)


@pytest.mark.deterministic(reason="argument errors; no tolerance")
def test_sample_and_risk_errors():
    rng = np.random.default_rng(50)
    x = PI3.rvs(4, rng=rng)
    with pytest.raises(ValueError, match="'x_pos' must have the shape of 'x'"):
        TrainingSample(x, x[:3], PI3.rvs(2, rng=rng))
    with pytest.raises(ValueError, match=r"'negatives' must have shape \(n, k, p\) = \(4, k, 3\)"):
        TrainingSample(x, x, PI3.rvs((3, 2), rng=rng))
    with pytest.raises(ValueError, match="'negatives' must have last axis of length 3"):
        TrainingSample(x, x, Uniform(4).rvs(2, rng=rng))
    with pytest.raises(ValueError, match="'k' must be >= 1"):
        TrainingSample.draw(PI3, M8, 4, 0, rng=rng)
    with pytest.raises(ValueError, match="'shared' must be True or False"):
        TrainingSample.draw(PI3, M8, 4, 2, rng=rng, shared="yes")
    sample = TrainingSample(x, x, PI3.rvs(2, rng=rng))
    assert sample.shared and sample.k == 2 and sample.n == 4
    with pytest.raises(AttributeError, match="immutable"):
        sample.x = x
    with pytest.raises(ValueError, match="'tau' must be > 0"):
        EmpiricalRisk(sample, 0.0)
    risk = EmpiricalRisk(sample, 0.5)
    with pytest.raises(ValueError, match="'phi' must be a simkit Embedding"):
        risk.value(lambda z: z)
    with pytest.raises(ValueError, match="'phi' must take points in R\\^3"):
        risk.value(LinearEmbedding.identity(4))
    # phi undefined at a training point: the jitted path reports it by name
    two = TwoLayerEmbedding([[1.0, 0.0, 0.0]], [0.0], [[1.0], [2.0]])
    bad = TrainingSample(np.array([[0.0, 1.0, 0.0]]), np.array([[1.0, 0.0, 0.0]]), PI3.rvs((1, 2), rng=rng))
    with pytest.raises(ValueError, match="'phi' is undefined at a point of the training sample"):
        EmpiricalRisk(bad, 0.5).value_and_grad(two)


# ----------------------------------------------------------------------------------------------
# the trainer


def test_trainer_is_deterministic_and_reports():
    risk = EmpiricalRisk(TrainingSample.draw(PI3, M8, 300, 16, rng=60), TAU)
    runs = [train(risk, TwoLayerEmbedding.random(3, 3, 4, rng=61), restarts=3, rng=62, maxiter=60)
            for _ in range(2)]
    np.testing.assert_array_equal(runs[0].embedding.params, runs[1].embedding.params)
    for a, b in zip(runs[0].candidates, runs[1].candidates):
        np.testing.assert_array_equal(a.params, b.params)
    res = runs[0]
    assert len(res.reports) == 3 and [r.restart for r in res.reports] == [0, 1, 2]
    assert res.report.value == min(r.value for r in res.reports)
    for r in res.reports:
        assert r.value <= r.start_value and r.iterations >= 1 and r.n_evaluations >= r.iterations
        assert r.grad_norm >= 0 and isinstance(r.message, str)
    assert res.report.value == pytest.approx(risk.value(res.embedding), abs=1e-14)
    # the linear family converges to a stationary point
    lin = train(risk, LinearEmbedding.random(3, 3, rng=63))
    assert lin.converged and lin.report.grad_norm <= 1e-6
    with pytest.raises(ValueError, match="'restarts' must be >= 1"):
        train(risk, LinearEmbedding.random(3, 3, rng=63), restarts=0)
    with pytest.raises(ValueError, match="'risk' must be an EmpiricalRisk"):
        train(None, LinearEmbedding.random(3, 3, rng=63))


# the trained models shared by the two statistical trainer tests: R training replicates per n,
# every replicate with its own seeds for the sample, the initialisation and the evaluation
TREND_N = (64, 512, 4096)
TREND_K = 32
TREND_REPS = 4
TREND_SEED = 20260701


@pytest.fixture(scope="module")
def trained():
    out = {}
    for n in TREND_N:
        for rep in range(TREND_REPS):
            s_sample, s_init, s_eval = np.random.SeedSequence(TREND_SEED, spawn_key=(n, rep)).spawn(3)
            risk = EmpiricalRisk(TrainingSample.draw(PI3, M8, n, TREND_K, rng=s_sample), TAU)
            res = train(risk, LinearEmbedding.random(3, 3, rng=s_init))
            out[n, rep] = (risk, res, s_eval)
    return out


@statistical
@pytest.mark.false_fail(1.4e-5, reason="P(1 - rho > 0.1) from a gamma fit to a 20-replicate pilot (other seeds): 3.5e-6 per model, 4 models")
def test_trained_linear_embedding_is_orthogonal_up_to_scale(trained):
    """Uniform pi on S^2, M = vMF(x, 8), tau = 1/8, d = 3: the population optimum of R_k over
    phi_W is W = c x orthogonal (then Q = M, for every k), so the ERM should be close to it.

    Measure: rho = sigma_min(W)/sigma_max(W) >= 0.9 for each of the 4 models trained on n = 4096
    tuples with k = 32 (and ||W^T W / (||W||_F^2/3) - I||_2 <= 0.2). The deviation 1 - rho is
    O(n^-1/2) sampling noise of the ERM: in a pilot of 20 replicates (other seeds) it had mean 0.034,
    sd 0.010, max 0.058; a gamma fit gives P(1 - rho > 0.1) = 3.5e-6 per model, 1.4e-5 for four.
    Power: a trainer that stopped early or an optimum that is not an isometry (a random start has
    rho ~ 0.3-0.7; n = 64 gives 0.6-0.85) fails.
    """
    for rep in range(TREND_REPS):
        risk, res, _ = trained[4096, rep]
        assert res.converged, res.report.message
        w = res.embedding.W
        sv = np.linalg.svd(w, compute_uv=False)
        assert sv[-1] / sv[0] >= 0.9
        dev = np.linalg.norm(w.T @ w / (np.sum(w * w) / 3) - np.eye(3), 2)
        assert dev <= 0.2


@statistical
@pytest.mark.false_fail(4.1e-5 + 5e-5, reason="12 one-sided 4.5-SE bounds (4.1e-5) + the pilot bootstrap's 5e-5 for the trend and the 0.005 bound")
def test_trained_cross_entropy_approaches_minus_mi(trained):
    """CE(phi_hat_n) -> -I(x; x+) as n grows (uniform pi, vMF kernel, tau = 1/kappa: H = -I is the
    minimum of CE, attained by isometries). KL_n = CE(phi_hat_n) + I >= 0 is estimated on fresh data
    (256 anchors x 64 positives, log Z by quadrature, identity control variate) with its MCSE.

    Checks: (1) each KL estimate >= -4.5 MCSE (Gibbs; 12 one-sided tests, 4.1e-5); (2) the mean
    over 4 training replicates decreases strictly along n = 64, 512, 4096; (3) at n = 4096 the mean
    is <= 0.005 nats (CE within 0.3% of -I = -1.77). Pilot (20 replicates per n, other seeds): mean
    KL 0.044 (sd 0.024), 0.0053 (0.0026), 0.0005 (0.0004), about 2.5/n; MCSE 0.0025, 0.0008, 0.0003.
    A bootstrap of the pilot gives a false-failure rate of 5e-5 for (2)-(3) (a gamma fit: < 1e-6).
    Power: a trainer or estimator with a bias floor above 0.005 nats, or no decrease with n, fails.
    """
    means = []
    for n in TREND_N:
        kls = []
        for rep in range(TREND_REPS):
            risk, res, s_eval = trained[n, rep]
            est = population(res.embedding, PI3, M8, TAU, TREND_K, n_anchors=256, n_positives=64, rng=s_eval)
            assert est.control and est.z_method == "quadrature"
            kl = est.cross_entropy + MI
            assert kl >= -4.5 * est.cross_entropy_mcse
            kls.append(kl)
        means.append(np.mean(kls))
    assert means[0] > means[1] > means[2], means
    assert means[2] <= 0.005, means


# ----------------------------------------------------------------------------------------------
# population quantities


@statistical
@pytest.mark.false_fail(3 * 6.8e-6, reason="3 two-sided 4.5-SE normal bounds; the MCSE ceilings are several times the expected MCSEs")
def test_identity_population_matches_exact():
    """phi = identity on uniform S^2, vMF(8), tau = 1/8, k = 64: CE = -I, R_k = -I + log k + gap_k
    with gap_k from the exact Laplace-transform formula (simkit.exact.gap_exact), estimated without
    the control variate (with it, CE is exact: checked to 1e-12). z-tests at 4.5 SE:
    3 x 6.8e-6 = 2.0e-5. Power: MCSEs ~0.012 (R_k, CE) and ~0.004 (gap) here, so biases above
    7.6 MCSE (~0.09 and ~0.03 nats) are detected with probability >= 0.999."""
    k = 64
    gap = float(exact.gap_exact(M8, 3, TAU, [k])[0])
    phi = LinearEmbedding.identity(3)
    est = population(phi, PI3, M8, TAU, k, n_anchors=512, n_positives=8, control=False, rng=70)
    assert not est.control and est.z_method == "quadrature"
    assert abs(est.cross_entropy + MI) <= 4.5 * est.cross_entropy_mcse
    assert abs(est.risk - (-MI + np.log(k) + gap)) <= 4.5 * est.risk_mcse
    assert abs(est.bias_gap - gap) <= 4.5 * est.bias_gap_mcse
    assert est.cross_entropy_mcse < 0.03 and est.bias_gap_mcse < 0.01
    # with the control variate the identity's CE estimate is exact: b_i = c_i + CE_id
    est = population(phi, PI3, M8, TAU, k, n_anchors=64, n_positives=2, rng=71)
    assert est.control and abs(est.cross_entropy + MI) <= 1e-12
    assert est.cross_entropy_mcse <= 1e-12


@statistical
@pytest.mark.false_fail(6.8e-6 + 1e-4, reason="one two-sided 4.5-SE bound + an allowance, not computed exactly, for the jackknife bias estimate's 50% and 0.1-MCSE bounds")
def test_pool_agrees_with_quadrature_and_bias_is_negligible():
    """A non-isometric linear phi on S^2: z_method = "pool" vs "quadrature" with the same seed. The
    pool is drawn last, so both see the same anchors, positives and negatives, and the difference of
    the CE estimates is the pool's error alone: z-test against pool_mcse at 4.5 (6.8e-6).

    The pool's O(1/P) bias: the jackknife estimate is within 50% of the delta-method value
    -E[Z2/Z^2 - 1]/(2P) (computed with phi's Z by quadrature) and below 0.1 MCSE of the CE estimate,
    i.e. negligible: it shifts a 4.5-SE z-test by < 0.1 SE.
    """
    rng = np.random.default_rng(80)
    phi = LinearEmbedding(np.eye(3) + 0.3 * rng.standard_normal((3, 3)))
    kw = dict(n_anchors=256, n_positives=16, rng=81)
    quad = population(phi, PI3, M8, TAU, 16, z_method="quadrature", **kw)
    pool = population(phi, PI3, M8, TAU, 16, z_method="pool", pool_size=1 << 16, **kw)
    assert pool.z_method == "pool" and pool.pool_size == 1 << 16
    assert pool.risk == quad.risk  # same draws, Z not involved
    assert abs(pool.cross_entropy - quad.cross_entropy) <= 4.5 * pool.pool_mcse
    # delta-method bias -(Z2/Z^2 - 1)/(2P), averaged over anchors (Z, Z2 by quadrature)
    x = PI3.rvs(32, rng=82)
    with threadpool_limits(limits=1, user_api="blas"):
        lz = log_partition(PI3, x, TAU, phi)
        lz2 = log_partition(PI3, x, TAU / 2, phi)
    predicted = -np.mean(np.expm1(lz2 - 2 * lz)) / (2 * pool.pool_size)
    assert pool.pool_bias == pytest.approx(predicted, rel=0.5)
    assert abs(pool.pool_bias) <= 0.1 * pool.cross_entropy_mcse


@statistical
@pytest.mark.false_fail(6.8e-6, reason="one two-sided 4.5-SE normal bound; the identity's CE is exact (1e-12)")
def test_exact_discrete_agrees_with_pool():
    """Discrete pi (40 atoms in R^6) with a two-layer phi into S^2 (d < p): log Z exact (finite sum)
    vs a pool of atoms; same draws, so the difference is the pool's error: z-test at 4.5 pool MCSE
    (6.8e-6). With phi = identity the control variate makes CE exact (exact.cross_entropy, 1e-12)."""
    rng = np.random.default_rng(90)
    pi = Discrete(_unit(rng.standard_normal((40, 6))), rng.dirichlet(np.ones(40)))
    kern = VMFKernel(5.0)
    phi = TwoLayerEmbedding.random(6, 3, 8, rng=rng)
    kw = dict(n_anchors=256, n_positives=4, rng=91)
    ex = population(phi, pi, kern, 0.2, 8, **kw)
    assert ex.z_method == "exact"
    pool = population(phi, pi, kern, 0.2, 8, z_method="pool", pool_size=1 << 14, **kw)
    assert abs(ex.cross_entropy - pool.cross_entropy) <= 4.5 * pool.pool_mcse
    ident = population(LinearEmbedding.identity(6), pi, kern, 0.2, 8, **kw)
    assert ident.control
    assert abs(ident.cross_entropy - exact.cross_entropy(pi, kern, 0.2)) <= 1e-12


@pytest.mark.deterministic(reason="identities between the report's fields and the same seed's estimate")
def test_generalisation_report_arithmetic():
    rng = np.random.default_rng(100)
    risk = EmpiricalRisk(TrainingSample.draw(PI3, M8, 200, 16, rng=rng), TAU)
    phi = train(risk, LinearEmbedding.random(3, 3, rng=rng)).embedding
    rep = generalisation(phi, risk, PI3, M8, n_anchors=64, n_positives=4, rng=101)
    assert rep.train_risk == risk.value(phi)
    assert rep.gap == rep.population.risk - rep.train_risk
    assert rep.excess == pytest.approx(rep.population.cross_entropy - rep.train_risk + np.log(16), abs=1e-15)
    assert rep.gap_mcse == rep.population.risk_mcse and rep.excess_mcse == rep.population.cross_entropy_mcse
    assert (rep.n, rep.k, rep.tau) == (200, 16, TAU)
    assert set(rep.as_dict()["population"]) >= {"risk", "cross_entropy", "bias_gap", "pool_bias"}
    # the same seed gives the same estimate
    again = generalisation(phi, risk, PI3, M8, n_anchors=64, n_positives=4, rng=101)
    assert again == rep


def test_population_errors():
    phi = LinearEmbedding.identity(3)
    with pytest.raises(ValueError, match="'z_method' must be one of"):
        population(phi, PI3, M8, TAU, 4, z_method="mc")
    with pytest.raises(ValueError, match="'z_method' = 'quadrature' needs a continuous pi on S\\^1 or S\\^2"):
        population(LinearEmbedding.identity(4), Uniform(4), M8, TAU, 4, z_method="quadrature")
    with pytest.raises(ValueError, match="'z_method' = 'exact' needs a Discrete pi"):
        population(phi, PI3, M8, TAU, 4, z_method="exact")
    with pytest.raises(ValueError, match="'pool_size' must be a multiple of 'pool_blocks'"):
        population(phi, PI3, M8, TAU, 4, z_method="pool", pool_size=1000, pool_blocks=16)
    with pytest.raises(ValueError, match="'phi' must take points in R\\^3"):
        population(LinearEmbedding.identity(4), PI3, M8, TAU, 4)
    with pytest.raises(ValueError, match="'n_anchors' must be >= 8"):
        population(phi, PI3, M8, TAU, 4, n_anchors=4)
    with pytest.raises(ValueError, match="'control' must be True, False or 'auto'"):
        population(phi, PI3, M8, TAU, 4, control="yes")
