"""Claim C4: the pre-registered non-inferiority rule (protocols/continuity.md) at the protocol's values and
the continuity study. The bounds are tested in tests/exact/test_loss_bounds.py, the perturbations in
tests/embeddings/test_perturbation.py, the rule's implementation in simkit.stats.trend.

* The rule: one-sided (a decrease shows non-inferiority, unlike the two-sided point null), its size
  at the margin, and positive controls: the running max of the same draws whose running mean passes,
  and synthetic growth above delta, must NOT pass; the verdict logic of section 7.
* The study: the quick design's checks; resume after interruption equals an uninterrupted run;
  deterministic edits of real blocks (averaging and max bounds swapped; one violation) make the
  primary/exploratory, resp. the deterministic, check fail; the report renders from the dataset alone;
  only the registered design records the protocol; the committed confirmatory dataset names it;
  invalid inputs are rejected with messages naming the argument.

Statistical budget of this file (seeds fixed before the assertions were first run; never re-seeded):
the quick design (the study's default seed) -- the positive-control and secondary assertions (each
below 1e-6 at the slopes stated in protocols/continuity.md) -- and the size test of the rule at its
margin (binomial tails 2.8e-4): at most 2.9e-4 in the default suite. The 6 exploratory flatness
tests of the parametric cells are in the slow suite: their point null is false at eps = 0.5 (the
averaging bound falls slightly), so no p-value floor bounds their rate (calibrated: 7/200 at 1e-3).
Power is stated with each test.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from simkit.claims.protocol import protocol_sha256
from simkit.runner import read_dataset, resolve_config, run_study
from simkit.stats import trend
from studies.continuity import (ALPHA, ALPHA_NI, B0, DELTA, PROTOCOL_PATH, STUDY, confirmatory_verdicts,
                                registered_design)

from resume_check import assert_resume_identical

statistical = pytest.mark.statistical


def non_inferiority(k, blocks, k_min=16, *, delta=DELTA, alpha=ALPHA_NI, ratio=False):
    """The pre-registered primary rule: simkit.stats.trend.fit_range_non_inferiority at the protocol's values."""
    return trend.fit_range_non_inferiority(k, blocks, k_min, delta=delta, alpha=alpha, ratio=ratio)


def growth_test(k, blocks, k_min=16, *, alpha=ALPHA_NI, ratio=False):
    """The pre-registered secondary test: simkit.stats.trend.growth_test at the protocol's level."""
    return trend.growth_test(k, blocks, k_min, alpha=alpha, ratio=ratio)


def test_invalid_config():
    with pytest.raises(ValueError, match="'eps' must list distinct numbers in"):
        resolve_config(STUDY, {"eps": "0.1,2"})
    with pytest.raises(ValueError, match="'eps' must list distinct numbers in"):
        resolve_config(STUDY, {"eps": "0.1,0.1"})
    with pytest.raises(ValueError, match="'k_fit_min' must be <= k_max / 8"):
        resolve_config(STUDY, {"k_max": 64, "k_fit_min": 16})


# ----------------------------------------------------------------------------------------------
# the pre-registered rule (protocols/continuity.md)

K_GRID = 2.0 ** np.arange(13)


def _power_blocks(rng, n, growth, noise):
    """Blocks of a curve c(k) = (1 + growth)^{log2 k}, each with i.i.d. relative noise per k (sd ``noise``)."""
    curve = (1 + growth) ** np.log2(K_GRID)
    return curve * (1 + noise * rng.standard_normal((n, K_GRID.size)))


@pytest.mark.deterministic(reason="synthetic curves far from the margin (p < 1e-10 or > 1 - 1e-10) and noiseless ones")
def test_rule_is_one_sided_and_has_the_margin_of_the_protocol():
    """Deterministic: a clear decrease shows non-inferiority (a two-sided point null would reject it),
    growth above delta never does; the margin and level are the protocol's."""
    assert DELTA == 0.01 and ALPHA_NI == 0.01 and B0 == pytest.approx(np.log2(1.01), rel=1e-15)
    protocol = (_root() / PROTOCOL_PATH).read_text(encoding="utf-8")
    assert "δ = +1 % per doubling" in protocol and "α = 0.01" in protocol and "n_blocks = 128" in protocol
    rng = np.random.default_rng(21)
    down = non_inferiority(K_GRID, _power_blocks(rng, 32, -0.05, 1e-3))
    assert down.reject and down.p < 1e-10 and down.growth == pytest.approx(-0.05, abs=1e-3)
    flat = non_inferiority(K_GRID, _power_blocks(rng, 32, 0.0, 1e-3))
    assert flat.reject and abs(flat.growth) < 1e-3
    up = non_inferiority(K_GRID, _power_blocks(rng, 32, 0.02, 1e-3))  # twice the margin
    assert not up.reject and up.p > 1 - 1e-10
    # noiseless curves: p is 0 or 1 exactly, by the sign of b - b0
    exact = np.tile((1.005) ** np.log2(K_GRID), (5, 1))
    assert non_inferiority(K_GRID, exact).reject
    assert not non_inferiority(K_GRID, np.tile((1.015) ** np.log2(K_GRID), (5, 1))).reject


def _root():
    from pathlib import Path
    return Path(__file__).resolve().parents[2]


@pytest.mark.false_fail(2.8e-4, reason=(
    "exact binomial tails: P(X >= 13 | 400, 0.01) = 2.5e-4 + P(X <= 49 | 100, 0.69) = 2.5e-5"))
@statistical
def test_rule_has_its_size_at_the_margin():
    """At growth exactly delta the rule rejects with probability alpha = 0.01: over 400 independent
    data sets of 24 blocks (relative noise 2% per k), at most 12 rejections (binomial tail
    P(X >= 13 | 400, 0.01) = 2.5e-4), and it is not trivially conservative: at growth 3 SE below the
    margin (power ~0.69 with t_{0.99;23} = 2.50) it rejects in at least 50 of 100 data sets
    (P(X <= 49 | 100, 0.69) = 2.5e-5). False-failure rate of the test: 2.8e-4."""
    rng = np.random.default_rng(22)
    at = [non_inferiority(K_GRID, _power_blocks(rng, 24, DELTA, 0.02)).reject for _ in range(400)]
    assert sum(at) <= 12, sum(at)
    se = non_inferiority(K_GRID, _power_blocks(rng, 24, DELTA, 0.02)).se
    below = 2 ** (B0 - 3 * se) - 1
    near = [non_inferiority(K_GRID, _power_blocks(rng, 24, below, 0.02)).reject for _ in range(100)]
    assert sum(near) >= 50, sum(near)


@pytest.mark.deterministic(reason=(
    "t > +20 against the margin for the max and < -5 for the mean: no chance failure in practice"))
def test_positive_control_max_of_the_same_draws_must_not_pass():
    """The same rule on the running max and on the running mean of the same i.i.d. half-normal draws
    (32 tuples x 4096 per block, 16 blocks): the mean (an average over the negatives) passes, the max
    (grows like sqrt(2 log k): ~+6% per doubling over k >= 16) must not. Deterministic at this seed and
    by a wide margin: the max's t statistic against the margin is > +20, the mean's < -5."""
    rng = np.random.default_rng(23)
    idx = (K_GRID - 1).astype(int)
    mx, mean = [], []
    for _ in range(16):
        d = np.abs(rng.standard_normal((32, 4096)))
        mx.append(np.maximum.accumulate(d, axis=1)[:, idx].mean(axis=0))
        mean.append((np.cumsum(d, axis=1)[:, idx] / K_GRID).mean(axis=0))
    r_max, r_mean = non_inferiority(K_GRID, np.array(mx)), non_inferiority(K_GRID, np.array(mean))
    assert not r_max.reject and r_max.t > 20 and 0.04 < r_max.growth < 0.10
    assert r_mean.reject and r_mean.t < -5
    # and through the secondary ratio test, max / mean grows
    b, se, t, p, reject = growth_test(K_GRID, np.stack([np.array(mx), np.array(mean)], axis=1), ratio=True)
    assert reject and b > 0.05


def test_rule_undefined_and_invalid_inputs():
    blocks = np.ones((5, K_GRID.size))
    blocks[:, 6] = 0.0  # a mean of 0 inside the fit range: log undefined
    r = non_inferiority(K_GRID, blocks)
    assert not r.defined and not r.reject and np.isnan(r.p)
    assert not non_inferiority(K_GRID, np.ones((2, K_GRID.size))).defined  # fewer than 3 blocks
    assert np.isnan(growth_test(K_GRID, blocks)[3])
    with pytest.raises(ValueError, match="'blocks' must have shape"):
        non_inferiority(K_GRID, np.ones((5, 3)))
    with pytest.raises(ValueError, match="'blocks' must have shape"):
        growth_test(K_GRID, np.ones((5, K_GRID.size)), ratio=True)
    with pytest.raises(ValueError, match="'delta' must be a number > -1"):
        non_inferiority(K_GRID, np.ones((5, K_GRID.size)), delta=-1)
    with pytest.raises(ValueError, match="'alpha' must be in"):
        non_inferiority(K_GRID, np.ones((5, K_GRID.size)), alpha=0)
    with pytest.raises(ValueError, match="'k_min' must leave at least two"):
        non_inferiority(K_GRID, np.ones((5, K_GRID.size)), k_min=4096)


def _verdict_inputs(p_avg=1e-6, p_negmax=0.99, p_max=0.99, s_p=1e-6, viol=0):
    shape = (2, 1)
    full = lambda v: np.full(shape, float(v))  # noqa: E731
    out = {"ni_avg_p": full(p_avg), "ni_avg_b": full(0.0), "ni_negmax_p": full(p_negmax), "ni_max_p": full(p_max),
           "ni_negmax_growth": full(0.05), "ni_max_growth": full(0.3), "s1_p": full(s_p), "s2_p": full(s_p),
           "violations_score": np.zeros((2, 1, 3)), "violations_avg": np.zeros((2, 1, 3)),
           "violations_max": np.zeros((2, 1, 3))}
    out["violations_avg"][0, 0, 1] = viol
    return out, ["a", "b"], ["params", "bump"], ["", ""]


def test_verdict_rule_of_section_7():
    v = confirmatory_verdicts(*_verdict_inputs())
    assert v["conclusion"] == "confirmed" and np.all(v["verdict"] == "pass") and np.all(v["control_verdict"] == "pass")
    v = confirmatory_verdicts(*_verdict_inputs(p_avg=0.02))  # p >= alpha: non-inferiority not shown
    assert v["conclusion"] == "not confirmed (growth >= delta not excluded)" and np.all(v["verdict"] == "fail")
    v = confirmatory_verdicts(*_verdict_inputs(p_max=1e-3))  # B_max passes the rule: a control in the bump cell only
    assert v["conclusion"].startswith("not confirmed (inconclusive")
    assert list(v["control_verdict"][:, 0]) == ["pass", "fail"]
    v = confirmatory_verdicts(*_verdict_inputs(p_negmax=np.nan))  # undefined control: fails
    assert np.all(v["control_verdict"] == "fail")
    v = confirmatory_verdicts(*_verdict_inputs(viol=1))
    assert v["conclusion"] == "not confirmed (bound violated)"
    v = confirmatory_verdicts(*_verdict_inputs(s_p=0.5))  # the secondary never changes the conclusion
    assert v["conclusion"] == "confirmed" and np.all(v["secondary_verdict"] == "fail")
    out, s, pert, _ = _verdict_inputs()
    v = confirmatory_verdicts(out, s, pert, ["", "boom"])
    assert v["conclusion"].startswith("error") and v["verdict"][1, 0] == "error"


def test_only_the_registered_design_records_the_protocol():
    cfg = resolve_config(STUDY)
    assert registered_design(cfg) and cfg["n_blocks"] == 128 and cfg["seed"] == 20261203
    attrs = STUDY.attrs(cfg)
    assert attrs["protocol_path"] == PROTOCOL_PATH and attrs["protocol_sha256"] == protocol_sha256(PROTOCOL_PATH)
    for other in (resolve_config(STUDY, quick=True), resolve_config(STUDY, seed=1),
                  resolve_config(STUDY, {"n_blocks": 64})):
        assert not registered_design(other) and "protocol_path" not in STUDY.attrs(other)


# ----------------------------------------------------------------------------------------------
# the study

TINY = {"settings": "twolayer-d16,linear-d16", "eps": "0.05,0.3", "k_max": 64, "k_fit_min": 4, "n_blocks": 4,
        "block_anchors": 4}


def test_resume_after_interruption(tmp_path, capsys):
    """Stopped after 3 tasks, then completed: identical to an uninterrupted run (engine.results_identical)."""
    cfg = resolve_config(STUDY, TINY, seed=20261401)
    assert_resume_identical(STUDY, cfg, tmp_path, stop_after=3, capsys=capsys)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The --quick design (3 settings x 3 eps, K = 2048, 16 blocks of 16 tuples) with the default seed."""
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["seed"] == STUDY.default_seed and cfg["k_max"] == 2048 and cfg["n_blocks"] == 16
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("continuity") / "continuity.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)


PARAMETRIC = [0, 1]  # setting indices of the parametric perturbations; 2 is the bump


def test_bounds_hold_on_every_tuple_quick(quick):
    """No tuple violates B_score, B_avg or B_max at any k (deterministic: the bounds are proved), in the
    parametric and the bump settings."""
    _, ds = quick
    assert ds.attrs["tuples_per_k"] == 16 * 16
    assert ds["perturbation"].values.tolist() == ["params", "params", "bump"]
    for tag in ("score", "avg", "max"):
        assert int(ds[f"violations_{tag}"].sum()) == 0, tag
        assert float(ds[f"tightness_{tag}"].max()) <= 1.0
    # B_score <= B_avg <= B_max hold exactly; in floating point the softmax weights sum to 1 only to
    # rounding, so B_avg can exceed B_max by an ulp where they coincide (k = 1)
    rel = 1e-12
    assert np.all(ds["bound_score"] <= ds["bound_avg"] * (1 + rel))
    assert np.all(ds["bound_avg"] <= ds["bound_max"] * (1 + rel))
    assert np.all(ds["dl"] <= ds["bound_score"])


@pytest.mark.slow
@pytest.mark.false_fail(0.071, reason="slow suite: the exploratory flat test at 1e-3 in 6 parametric cells; its point null is "
                        "false at eps = 0.5, so the rate is the calibrated one's upper 95% limit (7/200 [0.014, 0.071])")
@statistical
def test_c4_quick_flat_verdicts(quick):
    """The exploratory flatness rule's verdicts in the parametric cells, at the study's level 1e-3 (a point null
    that is false at eps = 0.5: docs/evidence.md, C4's pre-protocol rule)."""
    _, ds = quick
    par = ds.isel(setting=PARAMETRIC)
    assert np.all(par["slope_avg_p"] >= ALPHA), par["slope_avg_p"].values
    assert np.all(par["flat_verdict"] == "pass"), par["flat_reason"].values


@pytest.mark.false_fail(3e-6, reason=(
    "the control, secondary and primary rules (>= 10 SE from their margins, < 1e-6 each); the flat test's values "
    "are test_c4_quick_flat_verdicts's (slow)"))
@statistical
def test_c4_quick_checks(quick):
    """The quick design (never confirmatory: every row is labelled exploratory).

    Exploratory rule, parametric cells (as before the protocol): the two-sided test of zero slope of
    log E B_avg is checked in test_c4_quick_flat_verdicts (slow: a false point null at eps = 0.5); here
    only its power: it detects a slope of ~1e-3 with probability 0.9 (slope_avg_mde <= 5e-3). In every
    cell the one-sided test of positive slope for E B_max rejects at 1e-3 (B_max slopes 15-40 SEs).
    Pre-registered rule: the positive control (negatives' max in every cell, B_max in the bump cells)
    does not pass (pilot growth >= +2% per doubling, >= 10 SE above the +1% margin at this size:
    rate < 1e-6) and the secondary growth tests reject (>= 10 SE: rate < 1e-6); the primary passes in
    the parametric cells (SE ~2e-4 against a margin of 0.0144: rate < 1e-6). The bump cells' primary is
    not asserted: at 16 x 16 tuples its SE (~0.007) is half the margin (the confirmatory design has 16
    times the tuples)."""
    _, ds = quick
    par = ds.isel(setting=PARAMETRIC)
    assert np.all(ds["slope_max_p"] < ALPHA), ds["slope_max_p"].values
    assert np.all(par["slope_avg_mde"] <= 5e-3)
    assert np.all(par["slope_max"] > 5 * par["slope_avg_mde"])
    assert np.all(par["verdict"] == "pass"), par["verdict_reason"].values
    assert np.all(ds["control_verdict"] == "pass"), ds["control_reason"].values
    assert np.all(ds["secondary_verdict"] == "pass"), ds["secondary_reason"].values
    # the negatives' max term grows much faster than the softmax average (ratio > 1.1 at k_max); in the
    # bump setting the max has picked up the rare displaced negatives (ratio > 5)
    assert np.all(ds["ratio_negmax_negavg"].isel(k=-1) > 1.1)
    assert np.all(ds["ratio_max_avg"].isel(setting=2, k=-1) > 5)
    rows = STUDY.claim_rows(ds)
    assert len(rows) == 5 and all(r["claim"] == "C4" for r in rows), rows
    assert all(r["analysis"] == "exploratory" for r in rows)  # quick: never confirmatory
    det, primary, control, secondary, flat = rows
    # the proved bounds: a deterministic check, no false-failure rate
    assert det["verdict"] == "pass" and np.isnan(det["false_fail_rate"]) and "deterministic check" in det["statistic"]
    assert det["estimate"] == 0 and det["estimate_mcse"] == 0
    assert control["verdict"] == "pass" and secondary["verdict"] == "pass"
    assert 0 <= primary["false_fail_rate"] <= 1
    # the controls: at most ALPHA_NI per control test at the margin (one per setting, two in a bump setting)
    n_controls = sum(2 if str(p) == "bump" else 1 for p in ds["perturbation"].values)
    assert control["false_fail_rate"] == pytest.approx(1 - (1 - ALPHA_NI) ** n_controls)
    assert np.isnan(secondary["false_fail_rate"])  # must reject: its miss rate is not a false-failure rate
    assert "non-inferiority" in primary["statistic"] and "exploratory" in flat["statistic"]
    assert flat["false_fail_rate"] == pytest.approx(1 - (1 - ALPHA) ** 9)
    assert all(set(r) >= {"statistic", "estimate", "estimate_mcse", "detail"} for r in rows)


def test_quick_dataset_schema(quick):
    cfg, ds = quick
    assert ds["k"].values.tolist() == [2**i for i in range(12)]
    assert ds["eps"].values.tolist() == [0.01, 0.1, 0.5]
    assert ds["setting"].values.tolist() == ["twolayer-d16", "linear-d16", "bump-d16"]
    assert ds["bound_avg"].dims == ("setting", "eps", "k")
    assert ds["raw_bound_avg"].dims == ("setting", "block", "eps", "k")
    assert ds["ni_avg_p"].dims == ("setting", "eps") and ds["conclusion"].dims == ()
    # psi is at the requested distance from phi (parameters; or the bump's displacement at its centre)
    assert np.all(ds["raw_param_dist"].values > 0)
    np.testing.assert_allclose(ds["raw_param_dist"].values[2], np.broadcast_to(
        2 * np.sin(np.arctan(4 * ds["eps"].values) / 2), ds["raw_param_dist"].values[2].shape), rtol=1e-12)
    for name in list(ds.data_vars) + list(ds.coords):
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a) not in (None, ""), (name, a)
        assert name in STUDY.schema or name in ("block", "cell_error", "cell_key"), name
        if name.startswith(("dl", "bound", "raw_dl", "raw_bound")):  # nats; udunits reads "nat" as a pressure
            assert ds[name].attrs["units"] == "1" and "nats" in ds[name].attrs["long_name"], name
        assert ds[name].attrs["units"] != "nat"
    assert ds.attrs["study"] == "continuity" and ds.attrs["claim"] == "C4"
    assert json.loads(ds.attrs["config"]) == cfg
    assert "protocol_path" not in ds.attrs and ds.attrs["analysis"].startswith("exploratory")


@pytest.mark.deterministic(reason=(
    "deterministic edits of the quick blocks far beyond the margins (growth ~+30% against +1%); the "
    "untouched rows are compared with themselves"))
def test_negative_controls_make_the_checks_fail(quick):
    """Deterministic edits of the real blocks. With the averaging and max bounds swapped: the exploratory
    flatness test rejects in every cell (the max grows), and the max bound put through the primary rule
    does not pass in the bump cells (growth ~+30% per doubling, far above the +1% margin), so the
    primary check fails -- the positive control of the rule on real data. (In the parametric cells the
    max bound grows by only ~+0.7-2.6% per doubling, near the margin; protocols/continuity.md section 3.)"""
    cfg, ds = quick
    keep = [v for v in ds.data_vars if v.startswith("raw_") or v in ("cell_error", "cell_key")]
    raw = ds[keep].copy()
    raw["raw_bound_avg"], raw["raw_bound_max"] = ds["raw_bound_max"].copy(), ds["raw_bound_avg"].copy()
    bad = _summarised(raw, cfg, ds.attrs)
    assert np.all(bad["flat_verdict"] == "fail")
    for reason in bad["flat_reason"].values.ravel():
        assert "B_avg slope" in reason
    assert np.all(bad["verdict"].isel(setting=2) == "fail")
    assert np.all(bad["ni_avg_growth"].isel(setting=2) > 0.1)
    assert str(bad["conclusion"].values) != "confirmed"
    verdicts = [r["verdict"] for r in STUDY.claim_rows(bad)]
    assert verdicts[0] == "pass" and verdicts[1] == "fail" and verdicts[4] == "fail"
    # and a block with a violation is reported as such, by the deterministic check only
    raw2 = ds[keep].copy()
    v = raw2["raw_viol_avg"].values.copy()
    v[0, 0, 0, 3] = 1
    raw2["raw_viol_avg"] = (raw2["raw_viol_avg"].dims, v)
    bad2 = _summarised(raw2, cfg, ds.attrs)
    assert str(bad2["flat_verdict"].values[0, 0]) == "fail"
    assert "B_avg violated on 1" in str(bad2["flat_reason"].values[0, 0])
    assert str(bad2["conclusion"].values) == "not confirmed (bound violated)"
    rows = STUDY.claim_rows(bad2)
    assert rows[0]["verdict"] == "fail" and rows[0]["estimate"] == 1
    assert [r["verdict"] for r in rows[1:]] == [r["verdict"] for r in STUDY.claim_rows(ds)[1:]]


def _summarised(raw, cfg, attrs):
    """summarise's variables (a dict with the schema's dims) merged into ``raw``, as the runner does."""
    out = raw.copy().assign_attrs(attrs)
    for name, value in STUDY.summarise(raw, cfg).items():
        out[name] = (STUDY.schema[name].dims, np.asarray(value))
    return out


def test_report_from_quick_dataset(quick, tmp_path):
    _, ds = quick
    pages = STUDY.report(ds, tmp_path / "c4.pdf")
    assert pages >= 6 and (tmp_path / "c4.pdf").stat().st_size > 10_000
    with pytest.raises(ValueError, match="must be a continuity dataset"):
        STUDY.report(ds.drop_vars("bound_avg"), tmp_path / "bad.pdf")
    assert not (tmp_path / "bad.pdf").exists()


@pytest.mark.deterministic(reason="formula identities on the dataset's own numbers (rtol 1e-10)")
def test_critical_values_are_student_t(quick):
    """The detectable slope (probability 0.9) is (t_(1 - alpha/2) + t_0.9) x SE on n_blocks - 1 df (two-sided) for B_avg; the non-inferiority
    p-value is the lower Student t tail of (b - b0) / SE on n_blocks - 1 df."""
    _, ds = quick
    q = stats.t.isf(ALPHA / 2, ds.sizes["block"] - 1)
    np.testing.assert_allclose(ds["slope_avg_mde"], (q + stats.t.ppf(0.9, ds.sizes["block"] - 1)) * ds["slope_avg_se"],
                               rtol=1e-12)
    t = (ds["ni_avg_b"] - B0) / ds["ni_avg_b_se"]
    np.testing.assert_allclose(ds["ni_avg_t"], t, rtol=1e-12)
    np.testing.assert_allclose(ds["ni_avg_p"], stats.t.cdf(t, ds.sizes["block"] - 1), rtol=1e-10)
    np.testing.assert_allclose(ds["ni_avg_growth"], 2 ** ds["ni_avg_b"] - 1, rtol=1e-12)


def test_committed_dataset_is_the_confirmatory_run():
    """data/continuity.nc is the full design of protocols/continuity.md (tests/claims/test_protocols.py checks its
    hash and that the protocol commit is a strict ancestor of the run's commit); its claim rows of the
    protocol are labelled confirmatory, the pre-protocol check exploratory; the verdict variables are
    consistent with the rule recomputed from its raw blocks (no recomputation of the simulation)."""
    ds = read_dataset(_root() / "data" / "continuity.nc")
    cfg = json.loads(ds.attrs["config"])
    assert registered_design(cfg) and ds.attrs["protocol_path"] == PROTOCOL_PATH
    assert ds.attrs["protocol_sha256"] == protocol_sha256(PROTOCOL_PATH)
    rows = STUDY.claim_rows(ds)
    assert [r["analysis"].startswith("confirmatory") for r in rows] == [True, True, True, True, False]
    keep = [v for v in ds.data_vars if v.startswith("raw_") or v in ("cell_error", "cell_key")]
    again = _summarised(ds[keep].copy(), cfg, ds.attrs)
    for name in ("verdict", "control_verdict", "secondary_verdict", "conclusion"):
        np.testing.assert_array_equal(again[name].values, ds[name].values)
    # the p-values are far in the tail (down to 1e-221), where the t survival function amplifies the last bits of
    # its argument: recomputed on another machine than the run's they differ by up to 4.2e-12 relative (seen once),
    # bit for bit on the same machine; the decisions above are compared exactly
    np.testing.assert_allclose(again["ni_avg_p"].values, ds["ni_avg_p"].values, rtol=1e-9)
