"""Claim C4: the averaging and max continuity bounds (studies/continuity.py) and the continuity study.

* The bounds: per-tuple values against a direct evaluation (scipy logsumexp, explicit loops); the
  Gateaux derivative of l_k along a perturbation of the embeddings is the softmax average the
  module docstring states (central differences); the convexity bracket g'(0) <= dl <= g'(1); the
  bounds hold and are ordered B_score <= B_avg <= B_max on adversarial pairs (unrelated embeddings,
  tau from 0.02 to 50); negative controls: two wrong "bounds" (one endpoint's weights only; no
  anchor/positive term) are caught by the violation count.
* The study: the quick design passes its two checks (no bound violated: deterministic; slopes:
  statistical); resume after interruption equals an uninterrupted run; deterministic edits of real
  blocks (averaging and max bounds swapped; one violation) make the slope check, resp. the bounds
  check, fail; the report renders from the dataset alone; invalid inputs are rejected with messages
  naming the argument.

Statistical budget of this file (seed: the study's default, fixed before the quick design was first
run; never re-seeded): the quick design's 6 flatness tests at level 1e-3 each, so at most 6e-3. Power
is stated in test_c4_quick_checks. The study's random numbers come from the seed scheme of
simkit.runner (the study name is in the cell key), so they differ from the streams these tests first
ran on; no assertion below is specific to one stream.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from simkit.embedding import LinearEmbedding
from simkit.runner import read_dataset, resolve_config, run_study
from studies.continuity import ALPHA, STUDY, loss_difference_bounds, perturb, violations

from resume_check import assert_resume_identical

statistical = pytest.mark.statistical


def _unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def _tuples(rng, N, K, d):
    """Random unit vectors for (u, v, w) under phi and an unrelated psi."""
    g = lambda *s: _unit(rng.standard_normal(s))  # noqa: E731
    return g(N, d), g(N, d), g(N, K, d), g(N, d), g(N, d), g(N, K, d)


def _loss(u, v, w, tau):
    s = np.concatenate([[u @ v], w @ u]) / tau
    return logsumexp(s) - s[0]


# ----------------------------------------------------------------------------------------------
# the bounds

@pytest.mark.parametrize("tau", [0.05, 0.5, 5.0])
def test_bounds_match_direct_evaluation(tau):
    """Every output for every tuple and k against explicit per-tuple formulas (rtol 1e-10)."""
    rng = np.random.default_rng(1)
    N, K, d = 4, 9, 5
    u, v, w, u2, v2, w2 = _tuples(rng, N, K, d)
    ks = np.array([1, 2, 5, 9])
    b = loss_difference_bounds(u, v, w, u2, v2, w2, tau, ks)
    for i in range(N):
        du, dv = np.linalg.norm(u2[i] - u[i]), np.linalg.norm(v2[i] - v[i])
        for g, k in enumerate(ks):
            l1, l2 = _loss(u[i], v[i], w[i, :k], tau), _loss(u2[i], v2[i], w2[i, :k], tau)
            dw = np.linalg.norm(w2[i, :k] - w[i, :k], axis=1)
            r1 = (w[i, :k] @ u[i] - u[i] @ v[i]) / tau
            r2 = (w2[i, :k] @ u2[i] - u2[i] @ v2[i]) / tau
            P1 = np.exp(r1 - np.logaddexp(0, logsumexp(r1)))
            P2 = np.exp(r2 - np.logaddexp(0, logsumexp(r2)))
            q1, q2 = P1 / P1.sum(), P2 / P2.sum()
            want = {"loss": l1, "delta": l2 - l1,
                    "bound_score": max(P1 @ np.abs(r2 - r1), P2 @ np.abs(r2 - r1)),
                    "neg_avg": max(q1 @ dw, q2 @ dw), "neg_max": dw.max(),
                    "bound_avg": (2 * du + dv + max(q1 @ dw, q2 @ dw)) / tau,
                    "bound_max": (2 * du + dv + dw.max()) / tau}
            for name, value in want.items():
                assert b[name][i, g] == pytest.approx(value, rel=1e-10, abs=1e-13), (name, i, k)
        assert b["anchor_term"][i] == pytest.approx(2 * du + dv, rel=1e-12)


def test_default_grid_is_every_k():
    rng = np.random.default_rng(2)
    t = _tuples(rng, 3, 6, 4)
    full = loss_difference_bounds(*t, 0.7)
    some = loss_difference_bounds(*t, 0.7, [2, 6])
    assert full["delta"].shape == (3, 6)
    np.testing.assert_array_equal(full["bound_avg"][:, [1, 5]], some["bound_avg"])


def test_gateaux_derivative_is_softmax_average():
    """d/dt l_k(phi + t h) at t = 0 equals (1/tau) sum_j P_j [h(x).(w_j - v) + u.(h(x-_j) - h(x+))]
    (the loss as a function of arbitrary vectors; central difference, step 1e-6, agreement 1e-7)."""
    rng = np.random.default_rng(3)
    tau, K, d = 0.3, 12, 6
    u, v = _unit(rng.standard_normal(d)), _unit(rng.standard_normal(d))
    w = _unit(rng.standard_normal((K, d)))
    hu, hv, hw = rng.standard_normal(d), rng.standard_normal(d), rng.standard_normal((K, d))

    def loss(t):
        return _loss(u + t * hu, v + t * hv, w + t * hw, tau)

    num = (loss(1e-6) - loss(-1e-6)) / 2e-6
    r = (w @ u - u @ v) / tau
    P = np.exp(r - np.logaddexp(0, logsumexp(r)))
    formula = P @ (hu @ (w - v).T + (hw - hv) @ u) / tau
    assert num == pytest.approx(formula, abs=1e-7)
    assert P.sum() < 1  # the weights of the negatives sum to 1 - P_0


def test_convexity_bracket():
    """g'(0) <= l(psi) - l(phi) <= g'(1) on the score segment (the step that removes intermediate points)."""
    rng = np.random.default_rng(4)
    for _ in range(200):
        K = int(rng.integers(1, 20))
        r, r2 = rng.normal(0, 3, K), rng.normal(0, 3, K)
        G = lambda x: np.logaddexp(0, logsumexp(x))  # noqa: E731
        P = lambda x: np.exp(x - G(x))  # noqa: E731
        dl = G(r2) - G(r)
        assert P(r) @ (r2 - r) <= dl + 1e-12
        assert dl <= P(r2) @ (r2 - r) + 1e-12


@pytest.mark.parametrize("tau", [0.02, 0.5, 50.0])
def test_bounds_hold_on_adversarial_pairs(tau):
    """Unrelated embeddings (distances up to 2), 400 tuples x 64 negatives: no violation, and
    B_score <= B_avg <= B_max tuple by tuple (an average is at most a maximum)."""
    rng = np.random.default_rng(5)
    b = loss_difference_bounds(*_tuples(rng, 400, 64, 3), tau)
    for name in ("bound_score", "bound_avg", "bound_max"):
        assert not violations(b["delta"], b[name], b["loss"]).any(), name
    assert np.all(b["bound_score"] <= b["bound_avg"] * (1 + 1e-12))
    assert np.all(b["bound_avg"] <= b["bound_max"] * (1 + 1e-12))
    assert np.all(b["neg_avg"] <= b["neg_max"] * (1 + 1e-12))


def test_negative_controls_wrong_bounds_are_caught():
    """Two plausible but wrong 'bounds' that the violation count must flag:
    (a) the score-level average with phi's softmax weights only (no maximum over the two endpoints,
    i.e. the derivative at t = 0 taken for the whole segment): violated on ~1/4 of adversarial tuples;
    (b) the averaging bound without its anchor/positive term, for a psi that moves only the anchor's
    embedding: the negatives' term is 0, the loss still changes."""
    rng = np.random.default_rng(6)
    u, v, w, u2, v2, w2 = _tuples(rng, 400, 64, 3)
    tau = 0.5
    b = loss_difference_bounds(u, v, w, u2, v2, w2, tau)
    r = np.einsum("nd,nkd->nk", u, w - v[:, None, :]) / tau
    r2 = np.einsum("nd,nkd->nk", u2, w2 - v2[:, None, :]) / tau
    lse = np.logaddexp.accumulate(r, axis=1)
    one_sided = np.cumsum(np.exp(r) * np.abs(r2 - r), axis=1) / np.exp(np.logaddexp(0.0, lse))
    assert not violations(b["delta"], b["bound_score"], b["loss"]).any()
    assert violations(b["delta"], one_sided, b["loss"]).sum() > 1000
    b2 = loss_difference_bounds(u, v, w, u2, v, w, tau)  # only the anchor moves
    assert np.all(b2["neg_avg"] == 0) and not violations(b2["delta"], b2["bound_avg"], b2["loss"]).any()
    assert violations(b2["delta"], b2["neg_avg"] / tau, b2["loss"]).mean() > 0.9


def test_perturb_distance_and_determinism():
    phi = LinearEmbedding.random(4, 6, rng=0)
    psi = perturb(phi, 0.2, rng=1)
    assert np.linalg.norm(psi.params - phi.params) == pytest.approx(0.2 * np.linalg.norm(phi.params), rel=1e-12)
    np.testing.assert_array_equal(psi.params, perturb(phi, 0.2, rng=1).params)
    np.testing.assert_array_equal(perturb(phi, 0.0, rng=1).params, phi.params)


def test_invalid_inputs():
    rng = np.random.default_rng(7)
    t = _tuples(rng, 3, 4, 5)
    with pytest.raises(ValueError, match="'w' must have shape"):
        loss_difference_bounds(t[0], t[1], t[2][0], *t[3:], 0.5)
    with pytest.raises(ValueError, match="'v2' must have shape"):
        loss_difference_bounds(*t[:4], t[4][:2], t[5], 0.5)
    with pytest.raises(ValueError, match="'tau' must be a finite number > 0"):
        loss_difference_bounds(*t, 0.0)
    with pytest.raises(ValueError, match="'ks' must hold numbers of negatives in 1..4"):
        loss_difference_bounds(*t, 0.5, [0, 2])
    with pytest.raises(ValueError, match="'eps' must be a finite number >= 0"):
        perturb(LinearEmbedding.identity(3), -0.1, rng=0)
    with pytest.raises(ValueError, match="'rng' is required"):
        perturb(LinearEmbedding.identity(3), 0.1, rng=None)
    with pytest.raises(TypeError, match="rng"):
        perturb(LinearEmbedding.identity(3), 0.1)  # no default: no hidden source of randomness
    with pytest.raises(ValueError, match="'eps' must be numbers in"):
        resolve_config(STUDY, {"eps": "0.1,2"})
    with pytest.raises(ValueError, match="'eps' must not repeat"):
        resolve_config(STUDY, {"eps": "0.1,0.1"})
    with pytest.raises(ValueError, match="'k_fit_min' must be <= k_max / 8"):
        resolve_config(STUDY, {"k_max": 64, "k_fit_min": 16})


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
    """The --quick design (2 settings x 3 eps, K = 2048, 16 blocks of 16 tuples) with the default seed."""
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["seed"] == STUDY.default_seed and cfg["k_max"] == 2048 and cfg["n_blocks"] == 16
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("continuity") / "continuity.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path)


def test_bounds_hold_on_every_tuple_quick(quick):
    """No tuple violates B_score, B_avg or B_max at any k (deterministic: the bounds are proved)."""
    _, ds = quick
    assert ds.attrs["tuples_per_k"] == 16 * 16
    for tag in ("score", "avg", "max"):
        assert int(ds[f"violations_{tag}"].sum()) == 0, tag
        assert float(ds[f"tightness_{tag}"].max()) <= 1.0
    # B_score <= B_avg <= B_max hold exactly; in floating point the softmax weights sum to 1 only to
    # rounding, so B_avg can exceed B_max by an ulp where they coincide (k = 1)
    rel = 1e-12
    assert np.all(ds["bound_score"] <= ds["bound_avg"] * (1 + rel))
    assert np.all(ds["bound_avg"] <= ds["bound_max"] * (1 + rel))
    assert np.all(ds["dl"] <= ds["bound_score"])


@statistical
def test_c4_quick_checks(quick):
    """Per (setting, eps): the two-sided test of zero slope of log E B_avg on log k is not rejected at
    level 1e-3 (false-failure rate 1e-3 per cell, 6e-3 in all), and the one-sided test of positive
    slope for E B_max rejects at 1e-3. Power: at the time of writing the B_avg test detects a slope of
    ~1e-3 per unit log k with probability 0.8 (slope_avg_detect80, asserted <= 5e-3 below), while the
    max bound's slopes are 0.01-0.035, i.e. 15-40 SEs: its test fails with negligible probability."""
    _, ds = quick
    assert np.all(ds["slope_avg_p"] >= ALPHA), ds["slope_avg_p"].values
    assert np.all(ds["slope_max_p"] < ALPHA), ds["slope_max_p"].values
    assert np.all(ds["slope_avg_detect80"] <= 5e-3)
    assert np.all(ds["slope_max"] > 5 * ds["slope_avg_detect80"])
    assert np.all(ds["verdict"] == "pass"), ds["verdict_reason"].values
    # the negatives' max term grows much faster than the softmax average (ratio > 1.1 at k_max)
    assert np.all(ds["ratio_negmax_negavg"].isel(k=-1) > 1.1)
    rows = STUDY.claim_rows(ds)
    assert len(rows) == 2 and all(r["claim"] == "C4" and r["verdict"] == "pass" for r in rows), rows
    # the proved bounds: a deterministic check, no false-failure rate
    assert np.isnan(rows[0]["false_fail_rate"]) and "deterministic check" in rows[0]["statistic"]
    assert rows[0]["estimate"] == 0 and rows[0]["estimate_mcse"] == 0
    assert rows[1]["false_fail_rate"] == pytest.approx(1 - (1 - ALPHA) ** 6)
    assert all(set(r) >= {"statistic", "estimate", "estimate_mcse", "detail"} for r in rows)


def test_quick_dataset_schema(quick):
    cfg, ds = quick
    assert ds["k"].values.tolist() == [2**i for i in range(12)]
    assert ds["eps"].values.tolist() == [0.01, 0.1, 0.5]
    assert ds["setting"].values.tolist() == ["twolayer-d16", "linear-d16"]
    assert ds["bound_avg"].dims == ("setting", "eps", "k")
    assert ds["raw_bound_avg"].dims == ("setting", "block", "eps", "k")
    # psi is at the requested relative distance from phi in parameter space (checked per block)
    assert np.all(ds["raw_param_dist"].values > 0)
    for name in list(ds.data_vars) + list(ds.coords):
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a) not in (None, ""), (name, a)
        assert name in STUDY.schema or name in ("block", "cell_error", "cell_key"), name
        if name.startswith(("dl", "bound", "raw_dl", "raw_bound")):  # nats; udunits reads "nat" as a pressure
            assert ds[name].attrs["units"] == "1" and "nats" in ds[name].attrs["long_name"], name
    assert ds.attrs["study"] == "continuity" and ds.attrs["claim"] == "C4"
    assert json.loads(ds.attrs["config"]) == cfg


def test_negative_controls_make_the_slope_checks_fail(quick):
    """Deterministic edits of the real blocks: with the averaging and max bounds swapped, the
    flatness test rejects (the max grows) and the growth test does not detect growth (the average is
    flat), so every cell fails with both reasons."""
    cfg, ds = quick
    keep = [v for v in ds.data_vars if v.startswith("raw_") or v in ("cell_error", "cell_key")]
    raw = ds[keep].copy()
    raw["raw_bound_avg"], raw["raw_bound_max"] = ds["raw_bound_max"].copy(), ds["raw_bound_avg"].copy()
    bad = _summarised(raw, cfg, ds.attrs)
    assert np.all(bad["verdict"] == "fail")
    for reason in bad["verdict_reason"].values.ravel():
        assert "B_avg slope" in reason and "B_max growth not detected" in reason
    assert [r["verdict"] for r in STUDY.claim_rows(bad)] == ["pass", "fail"]
    # and a block with a violation is reported as such, by the deterministic check only
    raw2 = ds[keep].copy()
    v = raw2["raw_viol_avg"].values.copy()
    v[0, 0, 0, 3] = 1
    raw2["raw_viol_avg"] = (raw2["raw_viol_avg"].dims, v)
    bad2 = _summarised(raw2, cfg, ds.attrs)
    assert str(bad2["verdict"].values[0, 0]) == "fail"
    assert "B_avg violated on 1" in str(bad2["verdict_reason"].values[0, 0])
    rows = STUDY.claim_rows(bad2)
    assert [r["verdict"] for r in rows] == ["fail", "pass"] and rows[0]["estimate"] == 1


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


def test_critical_values_are_student_t(quick):
    """The detectable slope is t_(1 - alpha/2, n_blocks - 1) x SE (two-sided) for B_avg."""
    _, ds = quick
    q = stats.t.isf(ALPHA / 2, ds.sizes["block"] - 1)
    np.testing.assert_allclose(ds["slope_avg_detect50"], q * ds["slope_avg_se"], rtol=1e-12)
