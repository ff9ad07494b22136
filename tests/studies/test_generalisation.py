"""The generalisation study (claims C3, C5, C6) and the Fourier lift of simkit.embeddings.lifted.

Exact tests: the NumPy risk and gradient of simkit.embeddings.lifted against the pure-NumPy reference of
simkit.embeddings.training (1e-12) and central finite differences (1e-6 relative); the Fourier lift's unit
norm, tight frame, nested design, kernel identity and d-free Lipschitz constant; argument checks;
the seed split (common random numbers across the levels of a sweep); resumption after an
interruption gives the same dataset as an uninterrupted run; the report renders. The statistics the
study calls are tested in tests/stats/test_trend.py, the bound in tests/exact/test_bounds.py.

Statistical tests (fixed seeds chosen before the tests were first run and never changed; the
quick design uses the study's default seed):

=====================================================  ============================  ==========
test                                                   checks                        rate
=====================================================  ============================  ==========
test_quick_negative_control_sqrt_k_is_flagged          sqrt k growth on real noise   3e-4 to 5e-2
test_quick_checks                                      n-slope, k-trend, C5, C6      ~7e-3
test_quick_design_and_schema                           14 z-tests at 4.5 (cv = plain) 1.0e-4
=====================================================  ============================  ==========

Suite budget of this file: 1.0e-4 in the default suite (test_quick_design_and_schema). The first two
rows, about 7e-3 to 5.7e-2 (the range is the plug-in rate of the sqrt-k control, whose SE comes from
5 blocks: 3e-4 at the SE of the random streams before the seeds included the study name, 5e-2 at the
SE of the current ones), are in the slow suite: on 4 df no level within the default suite's budget
has useful power. Power of each check is stated in its test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from simkit import Uniform, VMFKernel
from simkit.runner import common_seeds, read_dataset, resolve_config, run_study, task_seed
from simkit.embeddings.lifted import LIFT_SEED, FourierEmbedding, LiftedRisk, lifted_value_and_grad
from simkit.embeddings.training import EmpiricalRisk, TrainingSample, _reference_value_and_grad, train
from simkit.exact.bounds import control_tau, linear_class_bound
from simkit.stats.trend import NonInferiority, trend_test
from simkit.claims.protocol import protocol_attrs, protocol_sha256
from simkit.stats import generalisation as rules
from simkit.stats.generalisation import c3_conclusion
from studies.generalisation import (ALPHA, DELTA_K, ETA, ISO_MIN, NI_SWEEPS, OLD_SWEEPS, P_DIM, POWER, PROTOCOL_PATH,
                                    SCHEMA, STUDY)


def ni_verdicts(ni):
    """The library's rule at the study's level and margin."""
    return rules.ni_verdicts(ni, alpha=ALPHA, delta=DELTA_K)

from resume_check import assert_resume_identical

statistical = pytest.mark.statistical
PI3 = Uniform(3)
M10 = VMFKernel(10.0)


# ----------------------------------------------------------------------------------------------
# the Fourier lift


@pytest.mark.parametrize("shared", [False, True])
def test_lifted_risk_matches_reference_and_finite_differences(shared):
    rng = np.random.default_rng(1)
    phi = FourierEmbedding.frame(3, 10, W=rng.standard_normal((3, 3)))
    s = TrainingSample.draw(PI3, M10, 7, 5, rng=2, shared=shared)
    w = rng.uniform(-1, 2, 7)
    for weights in (None, w):
        l1, g1 = lifted_value_and_grad(phi, s, 0.1, weights)
        l2, g2 = _reference_value_and_grad(phi, s, 0.1, weights)
        np.testing.assert_allclose(l1, l2, rtol=0, atol=1e-12)
        np.testing.assert_allclose(g1, g2, rtol=0, atol=1e-12)
    risk = LiftedRisk(s, 0.1)
    value, grad = risk.value_and_grad(phi)
    eps = 1e-6
    fd = np.array([(risk.value(phi.with_params(phi.params + eps * e)) - risk.value(phi.with_params(phi.params - eps * e)))
                   / (2 * eps) for e in np.eye(phi.n_params)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)
    assert value == pytest.approx(float(np.mean(lifted_value_and_grad(phi, s, 0.1)[0])), abs=1e-15)


def test_fourier_frame_norm_kernel_and_nesting():
    rng = np.random.default_rng(3)
    W = rng.standard_normal((3, 3))
    small, big = FourierEmbedding.frame(3, 8, W=W), FourierEmbedding.frame(3, 40, W=W)
    assert (small.d, small.m, big.d, big.m, small.n_params) == (8, 4, 40, 20, 9)
    for phi in (small, big):
        np.testing.assert_allclose(phi.A.T @ phi.A, phi.m / 3 * np.eye(3), rtol=0, atol=1e-12)  # tight frame
    # nested: both frames are polar factors of prefixes of one Gaussian matrix
    g = np.random.default_rng([LIFT_SEED, 0]).standard_normal((20, 3))
    for phi in (small, big):
        gm = g[:phi.m]
        np.testing.assert_allclose(phi.A @ np.linalg.inv(phi.A.T @ phi.A) @ phi.A.T,
                                   gm @ np.linalg.inv(gm.T @ gm) @ gm.T, atol=1e-12)
    x, y = PI3.rvs(50, rng=4), PI3.rvs(50, rng=5)
    fx, fy = big(x), big(y)
    np.testing.assert_allclose(np.linalg.norm(fx, axis=1), 1.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(np.sum(fx * fy, axis=1), big.kernel((x - y) @ W.T), rtol=0, atol=1e-13)
    assert FourierEmbedding.frame(3, 6).A.shape == (3, 3)
    np.testing.assert_allclose(FourierEmbedding.frame(3, 6).A @ FourierEmbedding.frame(3, 6).A.T, np.eye(3), atol=1e-12)


@pytest.mark.parametrize("d", [6, 16, 256])
def test_fourier_lipschitz_constant_is_d_free(d):
    """|d phi_W(x)| = |dW x| / sqrt(3) for every x, W and direction dW (J^T J = I/3): checked by
    central differences at random points and directions."""
    rng = np.random.default_rng(d)
    phi = FourierEmbedding.frame(3, d, W=2 * rng.standard_normal((3, 3)))
    assert phi.param_lipschitz() == pytest.approx(1 / np.sqrt(3), rel=1e-12)
    x = PI3.rvs(20, rng=rng)
    eps = 1e-6
    for _ in range(5):
        dW = rng.standard_normal((3, 3))
        fd = (phi.with_params(phi.params + eps * dW.ravel())(x) - phi.with_params(phi.params - eps * dW.ravel())(x)) / (2 * eps)
        np.testing.assert_allclose(np.linalg.norm(fd, axis=1), np.linalg.norm(x @ dW.T, axis=1) / np.sqrt(3),
                                   rtol=1e-6)


def test_fourier_training_and_errors():
    s = TrainingSample.draw(PI3, M10, 64, 4, rng=6)
    phi0 = FourierEmbedding.frame(3, 8, W=np.random.default_rng(7).standard_normal((3, 3)))
    res = train(LiftedRisk(s, 0.1), phi0, restarts=2, rng=8)
    assert isinstance(res.embedding, FourierEmbedding) and res.embedding.d == 8
    assert res.report.value < res.report.start_value and res.report.grad_norm < 1e-4
    again = train(LiftedRisk(s, 0.1), phi0, restarts=2, rng=8)
    np.testing.assert_array_equal(again.embedding.params, res.embedding.params)  # deterministic
    # the identity still goes through the jitted routine of the base class
    from simkit.embeddings.embedding import LinearEmbedding
    ident = LinearEmbedding.identity(3)
    assert LiftedRisk(s, 0.1).value(ident) == EmpiricalRisk(s, 0.1).value(ident)
    with pytest.raises(NotImplementedError, match="use|LiftedRisk"):
        EmpiricalRisk(s, 0.1).value(phi0)
    with pytest.raises(ValueError, match="'d' must be even"):
        FourierEmbedding.frame(3, 7)
    with pytest.raises(ValueError, match="'d' must be >= 6"):
        FourierEmbedding.frame(3, 4)
    with pytest.raises(ValueError, match="'A' must have shape"):
        FourierEmbedding(np.eye(3), np.ones((4, 2)))
    with pytest.raises(ValueError, match="'theta' must have length 9"):
        phi0.with_params(np.ones(4))
    with pytest.raises(AttributeError, match="immutable"):
        phi0.W = np.eye(3)


# ----------------------------------------------------------------------------------------------
# the study: configuration, seeds, resumption


def test_config_errors():
    with pytest.raises(ValueError, match="'ds' must list at least three distinct even dimensions >= 6"):
        resolve_config(STUDY, {"ds": "6,7,8"})
    with pytest.raises(ValueError, match="'taus' must list at least two distinct positive numbers"):
        resolve_config(STUDY, {"taus": "0.1"})
    with pytest.raises(ValueError, match="'k_trend_min' must leave at least 2 levels"):
        resolve_config(STUDY, {"k_trend_min": 1024})
    with pytest.raises(ValueError, match="'n_min' must be <= n_max"):
        resolve_config(STUDY, {"n_min": 8192})
    with pytest.raises(ValueError, match="must be one or more of n, k, tau, d"):
        resolve_config(STUDY, {"sweeps": "n,m"})


def _sweep_seeds(seed, sweep, block):
    """The seeds the study's generate() uses for ``block`` of ``sweep``."""
    return common_seeds(seed, "generalisation", {"sweep": sweep}, block, 4)


def test_levels_share_random_numbers():
    """The seed split: a sweep's levels share sample, init and evaluation seeds; the n sweep nests its
    samples, the k sweep its negatives; different blocks and sweeps differ."""
    cfg = resolve_config(STUDY, quick=True)
    cells = {c["point"]: c for c in STUDY.cells(cfg)}
    seeds = _sweep_seeds(cfg["seed"], "n", 2)
    s64 = STUDY._sample(cells["n=64"], cfg, np.random.default_rng(seeds[0]))
    s256 = STUDY._sample(cells["n=256"], cfg, np.random.default_rng(seeds[0]))
    np.testing.assert_array_equal(s256.x[:64], s64.x)
    np.testing.assert_array_equal(s256.negatives[:64], s64.negatives)
    seeds_k = _sweep_seeds(cfg["seed"], "k", 2)
    k4 = STUDY._sample(cells["k=4"], cfg, np.random.default_rng(seeds_k[0]))
    k64 = STUDY._sample(cells["k=64"], cfg, np.random.default_rng(seeds_k[0]))
    np.testing.assert_array_equal(k64.negatives[:, :4], k4.negatives)
    assert (k4.n, k4.k, k64.k) == (cfg["n_k"], 4, 64)
    other = _sweep_seeds(cfg["seed"], "n", 3)[0]
    assert other.generate_state(4).tolist() != seeds[0].generate_state(4).tolist()
    assert _sweep_seeds(cfg["seed"], "k", 2)[0].generate_state(4).tolist() != seeds[0].generate_state(4).tolist()
    # the sweep seeds come from the study seed through the runner's scheme, with this study's name
    want = task_seed(cfg["seed"], "generalisation", {"sweep": "n"}, 1, 2).spawn(4)
    assert [q.generate_state(4).tolist() for q in seeds] == [q.generate_state(4).tolist() for q in want]
    foreign = task_seed(cfg["seed"], "rademacher", {"sweep": "n"}, 1, 2).spawn(4)[0]
    assert foreign.generate_state(4).tolist() != seeds[0].generate_state(4).tolist()


TINY = {"sweeps": "n,d", "n_blocks": 3, "n_min": 32, "n_max": 128, "k_n": 4, "ds": "6,8,12", "n_d": 32, "k_d": 4,
        "eval_points": 2048, "eval_min": 64, "eval_max": 256, "ce_anchors": 8, "ce_positives": 1}


@pytest.mark.deterministic(reason="bit identity of a resumed run")
def test_resume_equals_uninterrupted(tmp_path):
    """Stopped after 4 of 12 tasks, then completed: identical to an uninterrupted run."""
    cfg = resolve_config(STUDY, TINY, seed=20261207)
    ref = assert_resume_identical(STUDY, cfg, tmp_path, stop_after=4)
    assert ref.n_tasks == 6 * (1 + 3)
    # one claim row per sweep run (C3 from n, C6 from d) and the bound check (C3, the n sweep is linear);
    # the variables of the other sweeps are absent
    assert [r["claim"] for r in STUDY.claim_rows(ref.dataset)] == ["C3", "C6", "C3"]
    assert "k_verdict" not in ref.dataset and "tau_verdict" not in ref.dataset


# ----------------------------------------------------------------------------------------------
# the quick design


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["seed"] == STUDY.default_seed
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("generalisation") / "g.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)


@pytest.mark.false_fail(14 * 6.8e-6, reason="14 two-sided 4.5-SE z tests of the zero-mean control variate")
def test_quick_design_and_schema(quick):
    cfg, ds = quick
    assert ds.sizes["block"] == cfg["n_blocks"] == 5
    assert [str(s) for s in ds["sweep"].values] == ["n"] * 3 + ["k"] * 5 + ["tau"] * 3 + ["d"] * 3
    assert ds["d"].values[ds["sweep"].values == "d"].tolist() == [6, 16, 64]
    assert set(ds["family"].values[ds["sweep"].values == "d"]) == {"fourier"}
    for name in ds.data_vars:
        for att in ("long_name", "units", "description"):
            assert ds[name].attrs.get(att) is not None, (name, att)
    for name in ds.coords:
        for att in ("long_name", "units", "description"):
            assert ds[name].attrs.get(att), (name, att)
    assert json.loads(ds.attrs["config"]) == cfg
    assert ds.attrs["alpha"] == ALPHA and ds.attrs["power"] == POWER and ds.attrs["lift_seed"] == LIFT_SEED
    assert "generalisation" in ds.attrs["seed_split"]
    # every declared variable is written with its dims (all four exploratory sweeps run; the pre-registered
    # sweeps' variables are absent from the quick design); nats are dimensionless
    for name, var in SCHEMA.items():
        if name.startswith(tuple(f"{s}_" for s in NI_SWEEPS)) or name == "c3_conclusion":
            assert name not in ds.variables, name
            continue
        assert name in ds.variables and ds[name].dims == var.dims, name
        assert ds[name].attrs["units"] == ("rad" if name == "angle" else "1"), name
    for name in ("gap_cv", "gap_cv_mcse", "raw_gap", "prep_risk_id", "k_trend", "n_fit"):
        assert "nats" in ds[name].attrs["long_name"], name
    # the summaries follow from the saved raw blocks and constants alone
    keep = [v for v in ds.data_vars if v.startswith(("raw_", "prep_")) or v in ("cell_error", "cell_key")]
    again = STUDY.summarise(ds[keep].copy(), cfg)
    assert set(again) <= set(SCHEMA) and {f"{s}_verdict" for s in OLD_SWEEPS} <= set(again)
    for name, value in again.items():
        np.testing.assert_array_equal(np.asarray(value), ds[name].values, err_msg=name)
    # raw per-replicate results are kept, and the summaries are their means
    np.testing.assert_allclose(ds["gap_cv"].values, ds["raw_gap_cv"].mean("block").values, rtol=1e-12)
    assert np.all(np.isfinite(ds["raw_gap_cv"].values)) and np.all(ds["converged"].values == 1.0)
    # E is computed for the linear family only; the Fourier family's Lipschitz constant is 1/sqrt(3)
    lin = ds["family"].values == "linear"
    assert np.all(np.isfinite(ds["excess_cv"].values[lin])) and np.all(np.isnan(ds["excess_cv"].values[~lin]))
    np.testing.assert_allclose(ds["lipschitz"].values[~lin], 1 / np.sqrt(3), rtol=1e-12)
    # the control variate has exactly zero mean: plain and cv estimate the same E[G]; z-test at 4.5
    # of their difference (its MCSE from the per-block differences) is part of the budget (6.8e-6 x 14)
    diff = ds["raw_gap"].values - ds["raw_gap_cv"].values
    z = diff.mean(axis=1) / (diff.std(axis=1, ddof=1) / np.sqrt(diff.shape[1]))
    assert np.all(np.abs(z) < 4.5), z


def _rows_follow_statistics(ds):
    """The claim rows' form, and every recorded verdict against its own statistic at ALPHA (exact);
    returns the first four rows, a reader of scalar variables and the t quantile at a level."""
    rows = STUDY.claim_rows(ds)
    assert [r["claim"] for r in rows] == ["C3", "C3", "C5", "C6", "C3"]
    assert rows[4]["statistic"].startswith("pre-registered bound check") and rows[4]["verdict"] == "pass"
    assert all(r["analysis"] == "exploratory" for r in rows)  # the quick design is never confirmatory
    rows = rows[:4]
    for r in rows:
        assert r["verdict"] in ("pass", "fail")
        assert np.isfinite(r["estimate"]) and np.isfinite(r["estimate_mcse"]) and r["estimate_mcse"] > 0
    for i in (0, 1, 3):
        assert 0 <= rows[i]["false_fail_rate"] <= 0.05
    assert np.isnan(rows[2]["false_fail_rate"])  # C5: must reject; power at the estimate is not a rate
    df = ds.sizes["block"] - 1
    tq = lambda p: stats.t.isf(p, df)  # noqa: E731
    v = lambda name: float(ds[name])  # noqa: E731
    assert (rows[0]["verdict"] == "pass") == (v("n_slope_t") <= tq(ALPHA))
    assert (rows[1]["verdict"] == "pass") == (v("k_trend_t") <= tq(ALPHA))
    assert (rows[2]["verdict"] == "pass") == (v("tau_slope_t") < -tq(ALPHA))
    assert (rows[3]["verdict"] == "pass") == (abs(v("d_trend_t")) <= tq(ALPHA / 2))
    assert v("n_slope_t") == pytest.approx((v("n_slope") + 0.5) / v("n_slope_se"), rel=1e-12)
    assert v("k_trend_detect") > 0 and v("d_trend_detect") > 0
    return rows, v, tq


@pytest.mark.deterministic(reason=(
    "the claim rows' form and the recorded verdicts against their own recorded statistics at ALPHA (identities); "
    "the checks' values: test_quick_checks (slow suite)"))
def test_quick_check_rows_follow_their_statistics(quick):
    """The quick design's claim rows are exploratory, finite, with their stated rates, and every recorded verdict
    agrees with its own statistic at ALPHA (exact). On 5 training sets (4 df) no test level the default suite's
    budget allows (t_{1 - 1e-5; 4} = 23.3) has useful power, so the checks' values are in the slow suite."""
    _, ds = quick
    _rows_follow_statistics(ds)


@pytest.mark.slow
@pytest.mark.false_fail(7e-3, reason=(
    "slow suite: the docstring's sum: n-slope and k-trend at 1e-3, C5 2.8e-3 (plug-in at the estimate), C6 1e-3 + "
    "1.5e-3"))
@statistical
def test_quick_checks(quick):
    """The study's checks on the quick design (default seed), tested at stricter levels than the
    study's ALPHA = 0.01 so that CI fails rarely by chance; the recorded verdicts must agree with
    their own statistics at ALPHA (exact).

    False-failure rates: n-slope t <= t_(1-1e-3) (1e-3 at the boundary -1/2; the true slope is ~ -1,
    -1.04 +- 0.30 with the default seed, so less); k-trend t <= t_(1-1e-3) (1e-3; E[G] is flat in k at
    large k); C5: growth must be shown at ALPHA (plug-in failure rate recorded in the row, 2.8e-3 with
    this design and seed; 3.8e-3 under the random streams before the seeds included the study name); C6:
    |t| <= t_(1-5e-4) (1e-3, plus ~1.5e-3 from the small decrease of E[G] with d seen in the full
    design, -4.5% of E[G] per doubling, about 2 quick-design SE). In all ~7e-3.
    Power (quick design, 5 training sets, default seed): k growth of ~0.010 nats (~35% of E[G]) and d
    trends of ~4% of E[G] per doubling are detected with probability 0.9 at ALPHA (each row's detail;
    ~0.007 nats / 25% and ~15% under the earlier random streams: the SEs rest on 5 blocks).
    """
    _, ds = quick
    rows, v, tq = _rows_follow_statistics(ds)
    # the checks themselves, at the stricter levels of the docstring
    assert v("n_slope_t") <= tq(1e-3) and v("n_slope") < -0.5
    assert v("k_trend_t") <= tq(1e-3)
    assert rows[2]["verdict"] == "pass" and v("tau_slope") < 0
    assert abs(v("d_trend_t")) <= tq(5e-4)


@pytest.mark.slow
@pytest.mark.false_fail(0.06, reason=(
    "slow suite: 'not null.reject' at ALPHA = 0.01 (the k-trend test on the real blocks) + the sqrt-k control's miss "
    "at p < 1e-3, ~5e-2 by the docstring's own plug-in (non-central t, 4 df)"))
@statistical
def test_quick_negative_control_sqrt_k_is_flagged(quick):
    """The k-stabilisation test on the quick design's own per-block G (k >= k_trend_min, real noise),
    with E[G] times sqrt(k / k_trend_min) - 1 added: the k-dependence of a bound that grows like
    sqrt k (E[G] quadruples over k = 16..256). The added slope is ~0.022 nats per doubling, ~11 SE of
    the quick design with the default seed (~17 SE under the random streams before the seeds included
    the study name): flagged with p < 1e-3 except with probability ~5e-2 at today's plug-in SE
    (noncentral t, 4 df; ~3e-4 at the earlier SE). The log-k law (+0.0074 nats per doubling here,
    ~3.8 SE) is covered with ample power by the synthetic control of
    tests/stats/test_trend.py::test_trend_test_null_and_growth_controls; on 5 training sets it would be missed at ALPHA with
    probability ~0.1-0.4 (plug-in), too often for CI."""
    cfg, ds = quick
    sel = (ds["sweep"].values == "k") & (ds["k"].values >= cfg["k_trend_min"])
    k = ds["k"].values[sel].astype(float)
    blocks = ds["raw_gap_cv"].values[sel].T
    level = blocks.mean()
    null = trend_test(np.log2(k), blocks, alternative="greater", alpha=ALPHA, power=POWER)
    assert null.slope == pytest.approx(float(ds["k_trend"]), rel=1e-12) and not null.reject
    grown = trend_test(np.log2(k), blocks + level * (np.sqrt(k / k[0]) - 1), alternative="greater", alpha=ALPHA,
                       power=POWER)
    assert grown.reject and grown.p < 1e-3, grown


def test_report_renders(quick, tmp_path):
    _, ds = quick
    pages = STUDY.report(ds, tmp_path / "g.pdf")
    assert pages >= 8 and (tmp_path / "g.pdf").stat().st_size > 10_000
    text = STUDY.summary_text(ds)
    assert "C6" in text and "n=64" in text
    with pytest.raises(ValueError, match="must be a generalisation dataset"):
        STUDY.report(ds.drop_vars("gap_cv"), tmp_path / "bad.pdf")
    assert not (tmp_path / "bad.pdf").exists()


# ----------------------------------------------------------------------------------------------
# the pre-registered part (protocols/generalisation.md): the rule, the positive control, the bound


def _ni(reject: bool, growth: float = 0.0, defined: bool = True) -> NonInferiority:
    """A rule result with the fields the verdicts read (the rule itself: tests/stats/test_trend.py)."""
    nan = float("nan")
    return NonInferiority(0.0, 0.003, growth, 0.003, -20.0 if reject else 5.0, 15, 1e-9 if reject else 0.7, reject,
                          16, defined) if defined else NonInferiority(nan, nan, nan, nan, nan, 15, nan, False, 16, False)


def test_ni_verdicts_and_c3_conclusion():
    """The verdicts of protocols/generalisation.md section 7: flat G (non-inferiority shown) passes, a control
    that is flagged passes, growth not excluded fails, a task error is an error, an undefined b never passes."""
    flat, sqrt_k, log_k = _ni(True), _ni(False, 0.414), _ni(False, 0.136)
    v = ni_verdicts({"kprim": (flat, ""), "kctl": (sqrt_k, ""), "krot": (log_k, ""), "kbrown": (flat, "boom")})
    assert [v[s][0] for s in NI_SWEEPS] == ["pass", "pass", "fail", "error"]
    assert "growth +13.6% per doubling of k: non-inferiority to +10% not shown" in v["krot"][1]
    assert "boom" in v["kbrown"][1]
    assert c3_conclusion({"kprim": "pass", "kctl": "pass"}) == "confirmed"
    # a control that passes the rule makes the design inconclusive, whatever the primary shows
    bad = ni_verdicts({"kctl": (flat, "")})["kctl"]
    assert bad[0] == "fail" and "cannot detect growth" in bad[1]
    assert c3_conclusion({"kprim": "pass", "kctl": "fail"}).startswith("not confirmed (inconclusive")
    assert c3_conclusion({"kprim": "fail", "kctl": "pass"}) == "not confirmed (growth >= delta not excluded)"
    und = _ni(False, defined=False)
    assert ni_verdicts({"kprim": (und, "")})["kprim"][0] == "fail"
    assert ni_verdicts({"kctl": (und, "")})["kctl"][0] == "fail"


def test_positive_control_cells():
    """The design's kctl cells carry tau sqrt(k_trend_min / k) (simkit.exact.bounds.control_tau: its
    complexity term grows like sqrt k, tests/exact/test_bounds.py); the bound of a point is the linear
    class's at the study's constants (s = ISO_MIN = 0.2: L_phi = 10)."""
    cfg = resolve_config(STUDY)
    cells = [c for c in STUDY.cells(cfg) if c["sweep"] == "kctl"]
    ks = [64, 128, 256, 512, 1024]
    assert [c["k"] for c in cells] == ks
    np.testing.assert_allclose([c["tau"] for c in cells], 0.1 * np.sqrt(64 / np.array(ks)), rtol=1e-15)
    assert [c["tau"] for c in cells] == [control_tau(0.1, k, 64) for k in ks]
    assert {c["sweep"] for c in STUDY.cells(cfg)} == set(OLD_SWEEPS) | set(NI_SWEEPS)
    pb = linear_class_bound(256, 64, 0.1, 5.5, p=P_DIM, s=ISO_MIN, eta=ETA)
    assert (ISO_MIN, ETA, P_DIM) == (0.2, 0.05, 3) and pb.loss_lipschitz == pytest.approx(400.0)


TINY_NI = {"sweeps": "kctl,kbrown", "n_blocks": 3, "n_k": 32, "k_max": 8, "k_step": 2, "k_trend_min": 4,
           "eval_points": 2048, "eval_min": 64, "eval_max": 128, "ce_anchors": 0, "ce_positives": 1}


@pytest.mark.deterministic(reason="provenance, schema and verdicts that follow from the recorded values")
def test_dataset_records_the_protocol(tmp_path):
    """A run of the pre-registered sweeps records the protocol's path, SHA-256 and commit; its rows name the
    protocol (confirmatory: a non-quick design of that protocol), and every NI variable follows the schema."""
    cfg = resolve_config(STUDY, TINY_NI, seed=20261208)
    res = run_study(STUDY, cfg, tmp_path / "g.nc", progress=False)
    assert res.completed and not res.errors
    ds = read_dataset(res.path)
    assert ds.attrs["protocol_path"] == PROTOCOL_PATH == "protocols/generalisation.md"
    assert ds.attrs["protocol_sha256"] == protocol_sha256(PROTOCOL_PATH)
    assert ds.attrs["protocol_commit"] == protocol_attrs(PROTOCOL_PATH)["protocol_commit"]
    assert ds.attrs["delta_k"] == DELTA_K
    rows = STUDY.claim_rows(ds)
    assert [r["claim"] for r in rows] == ["C3", "C7", "C3"]
    assert all(r["analysis"].startswith("confirmatory (protocols/generalisation.md, sha256 ") for r in rows)
    assert "POSITIVE CONTROL" in rows[0]["statistic"] and "Brownian" in rows[1]["statistic"]
    for s in ("kctl", "kbrown"):
        for name in (f"{s}_b", f"{s}_ni_p", f"{s}_verdict"):
            assert ds[name].dims == SCHEMA[name].dims and ds[name].attrs["units"] == "1", name
        assert ds["k"].values[ds["sweep"].values == s].tolist() == [4, 8]
    assert str(ds["c3_conclusion"].values).startswith("not evaluated")  # no primary sweep in this run
    assert "kprim_b" not in ds and "krot_b" not in ds
    # no R_k(identity) under the Brownian kernel over a vMF pi: no plain G, but the control-variate G
    br = ds["sweep"].values == "kbrown"
    assert np.all(np.isnan(ds["gap"].values[br])) and np.all(np.isfinite(ds["gap_cv"].values[br]))
    # the bound beside every point, and the recorded bound verdict follows from the recorded values
    assert np.all(np.isfinite(ds["bound_complexity"].values))
    spec = ds["in_class"].values == 1
    assert (str(ds["bound_verdict"].values) == "pass") == bool(
        spec.any() and np.all(ds["gap_upper"].values[spec] <= ds["bound_complexity"].values[spec]))
