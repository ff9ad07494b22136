"""A cell's preparation split into parts: the pooled Monte Carlo over anchors
(simkit.exact.curve.anchor_moments / pool_moments / constants_from_moments) and the runner's part
tasks (Study.prepare_parts, list dependencies of the executors, checkpoints, failures, resumption).

Truth here is independent of the split code: the pooled moments against NumPy's mean and
covariance of the concatenated sample, and the one-part estimator against gap_curve,
exact.bias_constant, exact.cross_entropy, exact.expansion_scales and expansion_constants run on the
very same anchors (the draws depend only on the generator and the per-component counts). Every
check is exact (to rounding); the Dask side is in tests/runner/test_dask.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit import exact
from simkit.distributions.designs import build_pi
from simkit.exact.curve import (_stratified_mean, anchor_moments, constants_from_moments, expansion_constants,
                                gap_curve, needs_monte_carlo, pool_moments)
from simkit.distributions.kernels import VMFKernel
from simkit.runner import read_dataset, resolve_config, results_identical, run_study, task_name
from simkit.runner.executors import DependencyFailed, InProcessExecutor, fill_dependencies
from studies.rate_k import STUDY, RateK

SEED = 20261203
MIX = {"pi": "mixture", "dim": 16, "kappa_pi": 20.0}
# a cell prepared in one task and a mixture cell with small Monte Carlo sizes in 4 parts; 8 blocks each
DESIGN = {"settings": "uniform-d3,mixture-d16", "k_max": 256, "n_blocks": 8, "block_anchors": 64, "pilot_blocks": 1,
          "n_mc": 1024, "prep_parts": 4}
N_TASKS = (1 + 8) + (4 + 1 + 8)


def _cfg(**over):
    return resolve_config(STUDY, {**DESIGN, **over}, seed=SEED)


@pytest.fixture(scope="module")
def mixture():
    cell = STUDY.cells(_cfg())[1]
    est = STUDY._estimator(cell, _cfg())
    return est.pi, est.kernel, est.tau, est.grid


# ----------------------------------------------------------------------------------------------
# the pooled moments


@pytest.mark.deterministic(reason="pooling algebra against NumPy on fixed arrays; no threshold on a random quantity")
def test_pooled_moments_are_those_of_the_concatenated_sample():
    rng = np.random.default_rng(1)
    data = [rng.standard_normal((n, 3)) * [1.0, 10.0, 1e-3] + [5.0, -2.0, 1e3] for n in (7, 1, 0, 12)]
    other = [rng.standard_normal((n, 2)) for n in (3, 0, 5, 2)]

    def moments(chunks):  # one component; an empty chunk is a part that drew none of it
        out = []
        for c in chunks:
            m = c.mean(axis=0) if len(c) else np.zeros(c.shape[1])
            out.append((np.array([len(c)], float), m[None, :], ((c - m).T @ (c - m))[None]))
        return out

    parts = [{"curve_n": a[0], "curve_mean": a[1], "curve_m2": a[2], "const_n": b[0], "const_mean": b[1],
              "const_m2": b[2]} for a, b in zip(moments(data), moments(other))]
    pooled = pool_moments(parts)
    for prefix, chunks in (("curve", data), ("const", other)):
        allx = np.concatenate(chunks)
        assert pooled[f"{prefix}_n"][0] == len(allx)
        np.testing.assert_allclose(pooled[f"{prefix}_mean"][0], allx.mean(axis=0), rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(pooled[f"{prefix}_m2"][0] / (len(allx) - 1), np.cov(allx, rowvar=False),
                                   rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match="'parts'"):
        pool_moments([])


@pytest.mark.deterministic(reason="the one-part estimator equals gap_curve and the exact module's Monte Carlo "
                                  "estimators on the same anchors (to rounding); no threshold on a random quantity")
def test_one_part_is_the_unsplit_estimator_on_the_same_anchors(mixture):
    pi, kernel, tau, ks = mixture
    n_cv = 2048
    got = constants_from_moments(pi, kernel, tau, ks, anchor_moments(pi, kernel, tau, ks, 0, 1, rng=np.random.default_rng(7),
                                                                  n_cv=n_cv))
    # gap_curve draws its 256 curve anchors, then its n_cv control-variate anchors: the same order
    ref = gap_curve(pi, kernel, tau, ks, rng=np.random.default_rng(7), n_cv=n_cv)
    for name in ("gap", "risk", "gap_mcse", "risk_mcse", "gap_cov"):
        np.testing.assert_allclose(getattr(got["curve"], name), getattr(ref, name), rtol=1e-9, atol=1e-14,
                                   err_msg=name)
    assert got["curve"].n_anchors == ref.n_anchors
    np.testing.assert_allclose(got["curve"].cross_entropy, ref.cross_entropy, rtol=1e-12)

    def after_curve(seed=7):  # a generator past the 256 curve anchors (draws depend on counts only)
        r = np.random.default_rng(seed)
        _stratified_mean(pi, lambda x: x[:, :1], 256, r)
        return r

    c = expansion_constants(pi, kernel, tau, rng=after_curve(), n_mc=n_cv)
    for key in ("c1", "c2"):
        np.testing.assert_allclose([got[key].value, got[key].mcse], [c[key].value, c[key].mcse], rtol=1e-9)
    c1 = exact.bias_constant(pi, kernel, tau, rng=after_curve(), n_mc=n_cv)
    np.testing.assert_allclose([got["c1"].value, got["c1"].mcse], [c1.value, c1.mcse], rtol=1e-9)
    ce = exact.cross_entropy(pi, kernel, tau, rng=after_curve(), n_mc=n_cv)
    np.testing.assert_allclose([got["ce"].value, got["ce"].mcse], [ce.value, ce.mcse], rtol=1e-11)
    r = after_curve()
    rho, _ = exact.expansion_scales(pi, kernel, tau, rng=r, n_mc=n_cv)  # rho on the same sample
    np.testing.assert_allclose(got["rho"], rho, rtol=1e-11)
    _, mbar = exact.expansion_scales(pi, kernel, tau, rng=after_curve(), n_mc=n_cv)
    assert mbar != got["mbar"]  # expansion_scales draws a second sample for mbar; the split shares one
    r = after_curve()
    m1z = exact.expectation(pi, lambda x: np.exp(exact.log_m1(kernel, x, tau) - exact.log_partition(pi, x, tau)),
                            rng=r, n_mc=n_cv)
    np.testing.assert_allclose(got["mbar"], m1z.value, rtol=1e-11)


@pytest.mark.deterministic(reason="counts and refusals; no threshold on a random quantity")
def test_parts_deal_out_the_anchors_and_refuse_what_they_cannot_split(mixture):
    pi, kernel, tau, ks = mixture
    parts = [anchor_moments(pi, kernel, tau, ks, j, 3, rng=np.random.default_rng(j), n_cv=1000, n_mc=20)
             for j in range(3)]
    pooled = pool_moments(parts)
    w = pi.as_mixture()[0]
    np.testing.assert_array_equal(pooled["const_n"], [max(2, round(1000 * wj)) for wj in w])
    np.testing.assert_array_equal(pooled["curve_n"], [max(2, round(20 * wj)) for wj in w])
    got = constants_from_moments(pi, kernel, tau, ks, pooled)
    assert np.all(np.isfinite(got["curve"].gap)) and got["curve"].n_anchors == int(pooled["curve_n"].sum())
    assert needs_monte_carlo(pi, kernel)
    uniform = build_pi({"pi": "uniform", "dim": 3})
    assert not needs_monte_carlo(uniform, VMFKernel(5.0))
    with pytest.raises(ValueError, match="exact rule over x"):
        anchor_moments(uniform, VMFKernel(5.0), 0.2, ks, 0, 2, rng=1)
    with pytest.raises(ValueError, match="'part'"):
        anchor_moments(pi, kernel, tau, ks, 3, 3, rng=1)
    with pytest.raises(ValueError, match="at least 2 anchors"):  # each part alone has too few of a component
        constants_from_moments(pi, kernel, tau, ks, parts[2] | {"curve_n": np.minimum(parts[2]["curve_n"], 1.0)})
    with pytest.raises(ValueError, match="values of k"):
        constants_from_moments(pi, kernel, tau, ks[:-1], pooled)


# ----------------------------------------------------------------------------------------------
# the executors' list dependencies


def test_fill_dependencies_and_in_process_list_dependencies():
    assert fill_dependencies(None, "a", {"a": 1}) == 1
    assert fill_dependencies([10, None, 30], [None, "b", None], {"b": 2}) == [10, 2, 30]
    with pytest.raises(ValueError, match="same length"):
        fill_dependencies([1], [None, "b"], {"b": 2})
    tasks = [("p0", (1,), None), ("p1", (2,), None), ("sum", ([100, None, None],), [None, "p0", "p1"]),
             ("after", (None,), "sum")]
    out = dict((k, r) for k, r, _ in InProcessExecutor().run(tasks, lambda v: sum(v) if isinstance(v, list) else v))
    assert out == {"p0": 1, "p1": 2, "sum": 103, "after": 103}

    def fail_p1(v):
        if v == 2:
            raise RuntimeError("p1")
        return sum(v) if isinstance(v, list) else v

    res = {k: e for k, _, e in InProcessExecutor().run(tasks, fail_p1)}
    assert isinstance(res["p1"], RuntimeError)
    assert isinstance(res["sum"], DependencyFailed) and isinstance(res["after"], DependencyFailed)


# ----------------------------------------------------------------------------------------------
# the runner


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    res = run_study(STUDY, _cfg(), tmp_path_factory.mktemp("ref") / "rate_k.nc", progress=False)
    assert res.completed and not res.errors and res.n_done == res.n_tasks == N_TASKS
    return res.dataset


@pytest.mark.deterministic(reason="the runner's preparation equals the parts combined by hand, bit for bit")
def test_split_cell_prepares_from_its_parts(reference, mixture):
    cfg = _cfg()
    uniform, cell = STUDY.cells(cfg)
    assert STUDY.prepare_parts(cell, cfg) == 4
    assert STUDY.prepare_parts(uniform, cfg) == 0
    # the combined preparation is what the parts give, computed here without the runner
    from simkit.runner.seeds import task_seed
    parts = [STUDY.prepare_part(cell, cfg, j, np.random.default_rng(task_seed(SEED, "rate_k", cell, 2, j)))
             for j in range(4)]
    prep = STUDY.combine_parts(cell, cfg, parts)
    for key, value in prep.items():
        np.testing.assert_array_equal(reference[f"prep_{key}"].values[1], value, err_msg=key)
    assert float(reference["prep_c1_exact_mcse"].values[1]) > 0  # a Monte Carlo constant, with its MCSE
    assert "coef" not in parts[1] and "coef" in parts[0]  # the pilot runs once, in part 0


def test_interrupted_inside_the_parts_resumes_to_the_same_dataset(reference, tmp_path, capsys):
    out = tmp_path / "rate_k.nc"
    res = run_study(STUDY, _cfg(), out, progress=False, stop_after=3)  # the uniform cell's preparation, 2 parts
    assert not res.completed and res.n_done == 3 and res.n_tasks == N_TASKS
    (partial,) = out.parent.glob(f".{out.name}.*.partial")
    uniform, cell = STUDY.cells(_cfg())
    assert sorted(p.stem for p in partial.glob("*.npz")) == sorted(
        [task_name("rate_k", uniform, 0, 0), *(task_name("rate_k", cell, 2, j) for j in (0, 1))])
    res = run_study(STUDY, _cfg(), out, progress=False)
    assert res.completed and res.dataset.attrs["resumed_tasks"] == 3
    assert results_identical(reference, res.dataset)
    assert results_identical(reference, read_dataset(out))


def test_a_failing_part_is_recorded_its_cell_waits_and_a_rerun_completes(reference, tmp_path):
    class FailingPart(RateK):
        def prepare_part(self, cell, cfg, part, rng):
            if part == 2:
                raise RuntimeError("injected failure of part 2")
            return super().prepare_part(cell, cfg, part, rng)

    out = tmp_path / "rate_k.nc"
    res = run_study(FailingPart(), _cfg(), out, progress=False)
    assert res.completed and len(res.errors) == 1
    err = res.errors[0]
    assert err["stage"] == "part" and err["block"] == 2 and err["spawn_key"][-2:] == [2, 2]
    assert "part block 2: RuntimeError: injected failure of part 2" in str(res.dataset["cell_error"].values[1])
    assert np.all(np.isnan(res.dataset["raw_gap_cv"].values[1]))  # no preparation: none of its blocks ran
    assert not np.any(np.isnan(res.dataset["raw_gap_cv"].values[0]))  # the other cell is complete
    res = run_study(STUDY, _cfg(), out, progress=False)  # the rerun runs the missing part, the combination, the blocks
    assert res.completed and not res.errors and res.dataset.attrs["resumed_tasks"] == 1 + 8 + 3
    assert results_identical(reference, res.dataset)


def test_prepare_parts_must_return_a_count(tmp_path):
    class Bad(RateK):
        def prepare_parts(self, cell, cfg):
            return -1

    with pytest.raises(ValueError, match="prepare_parts must return an int >= 0"):
        run_study(Bad(), _cfg(), tmp_path / "rate_k.nc", progress=False)
    assert list(tmp_path.iterdir()) == []  # refused before any checkpoint directory or lock was left
