"""Claim C7: the Brownian path of the search estimator and the asymmetry study.

* The heat-kernel log-density of the jitted search pass (float64 series and its double-double
  tail) against simkit.distributions.heat's exact fixed-point sum, and ``search_statistics`` / the estimator's
  per-query terms for a BrownianKernel against a direct NumPy reference (every log m from
  ``BrownianKernel.logpdf``); thread-count invariance.
* Non-reversibility of the study's kernels, numerically: the density ratio pi(x)M(x,y) /
  pi(y)M(y,x) exactly, and the exchangeability statistics E[x_1 x+_2 - x_2 x+_1] and
  E[x+_1 - x_1] by Monte Carlo against 0 and against their exact values.
* The study: its analysis equals rate_k's and search_ce's on the same blocks; the quick design
  passes; a negative control fails; resume after interruption; the declared schema, CF-1.11
  compliance of the file, claim rows and report.

Statistical budget of the default suite's part of this file (seeds fixed before the tests were
first run, never re-seeded): non-reversibility statistics 1e-5 (one Bonferroni family); the quick
design's 24 component null tests at p >= 1e-5 each, 2.4e-4. The verdicts at the study's ALPHA =
1e-3 (6.9e-3 per setting) are checked in the slow suite. The negative control and the equivalence
with rate_k/search_ce are deterministic functions of the quick dataset. Each statistical test
states its power.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from simkit import VonMisesFisher, exact
from simkit._jit.search import log_heat_values
from simkit.distributions.designs import ASYMMETRY_SETTINGS as SETTINGS
from simkit.distributions.designs import build_kernel, build_pi
from simkit.distributions.heat import BrownianKernel, _log_h_exact
from simkit.runner import read_dataset, resolve_config, run_study
from simkit.estimators.search import SearchEstimator, _heat_profile, search_statistics
from simkit.exact.moments import asymmetry_exact
from studies.asymmetry import ALPHA, SCHEMA, STUDY
from studies.rate_k import ALPHA as RATE_K_ALPHA
from studies.rate_k import STUDY as RATE_K
from studies.search_ce import ALPHA as SEARCH_CE_ALPHA
from studies.search_ce import STUDY as SEARCH_CE

from _false_fail import BOOTSTRAP_RATE, BOOTSTRAP_TESTS, below_floor, null_pvalues
from _cf import assert_cf_strict, assert_dimensionless
from resume_check import assert_resume_identical

QUICK_SETTINGS = ["rot-uniform-d3", "rot-vmf-d8", "brown-vmf-d3", "brown-vmf-d8"]
# the default suite's level for a test's own null comparisons (ALPHA is the study's, for its verdicts)
FLOOR = 1e-5
# the quick design's component null tests (Check.pvalues): C1 slope, curve, dgap, c1, c2 and C2 slope, 4 settings
N_NULL = 24


# ----------------------------------------------------------------------------------------------
# the Brownian density ratio in the jitted pass

@pytest.mark.parametrize("d, t", [(3, 0.15), (3, 0.2), (8, 0.1), (8, 0.2), (16, 0.1), (2, 0.3)])
def test_heat_profile_against_exact_sum(d, t):
    """log h_t(w) of the jitted pass (float64 series where its rounding bound is <= 1e-12 of the
    value, double-double elsewhere) against heat.py's fixed-point integer sum, on a grid of w
    with both ends refined: within 1e-12 (relative error of h_t), and both paths exercised."""
    kernel = BrownianKernel(t)
    prof = _heat_profile(kernel, d)
    tab = kernel._table(d)
    w = np.concatenate([np.linspace(-1.0, 1.0, 121), -1.0 + np.geomspace(1e-12, 0.1, 10),
                        1.0 - np.geomspace(1e-12, 0.1, 10)])
    got = log_heat_values(w, prof.a_hi, prof.a_lo, prof.n_float, prof.lam, prof.cut)
    log_sum_a = math.log(float(np.sum(tab.a)))
    want = np.array([_log_h_exact(float(v), d, t, log_sum_a) for v in w])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
    # the float64 series at w = 1 and the double-double sum at w = -1 (the far tail)
    assert got[np.argmax(w)] == pytest.approx(prof.log_h_max, abs=1e-14)
    assert got[np.argmin(w)] == pytest.approx(prof.log_h_min, abs=1e-12)
    assert prof.a_hi.size > prof.n_float  # the tail sum runs beyond heat.py's truncation


def test_heat_profile_refuses_small_t():
    """t admissible for heat.py but too small for a 1e-12 tail in double-double: ValueError naming t."""
    with pytest.raises(ValueError, match=r"'t' = 0\.05 is too small for the search estimator"):
        _heat_profile(BrownianKernel(0.05), 3)
    with pytest.raises(ValueError, match="'t'.*min_time"):
        _heat_profile(BrownianKernel(1e-3), 8)  # below BrownianKernel.min_time(8)


def _reference(x, xp, y, pi, kernel, tau, ks, n_top=10):
    """Every score and log m formed explicitly (log m = kernel.logpdf - pi.logpdf, heat.py)."""
    s0 = np.sum(x * xp, axis=1) / tau
    s = x @ y.T / tau
    lm = exact.log_m(pi, kernel, x[:, None, :], y[None, :, :])
    mu = exact.mean_score(kernel, x, tau)
    out = {n: np.full((len(x), len(ks)), np.nan) for n in ("loss", "ce", "top1", "recall", "ratio")}
    for g, k in enumerate(ks):
        lq = s[:, :k] - logsumexp(s[:, :k], axis=1, keepdims=True)
        pm = np.exp(lm[:, :k] - logsumexp(lm[:, :k], axis=1, keepdims=True))
        out["ce"][:, g] = -np.sum(pm * lq, axis=1)
        out["loss"][:, g] = logsumexp(np.column_stack([s0, s[:, :k]]), axis=1) - s0
        out["ratio"][:, g] = np.sum(pm * (s[:, :k] - mu[:, None]), axis=1)
        out["top1"][:, g] = np.argmax(s[:, :k], axis=1) == np.argmax(lm[:, :k], axis=1)
        if k >= n_top:
            ts = np.argsort(-s[:, :k], axis=1, kind="stable")[:, :n_top]
            tm = np.argsort(-lm[:, :k], axis=1, kind="stable")[:, :n_top]
            out["recall"][:, g] = [len(set(a) & set(b)) / n_top for a, b in zip(ts, tm)]
    out.update(m=np.exp(lm), s=s, mu=mu)
    return out


GRID = [1, 3, 8, 9, 10, 100, 511, 512, 513, 700]
BROWNIAN_CASES = [  # d <= SMALL_D: explicit loops; d > SMALL_D: BLAS scores
    ("vmf-d3", VonMisesFisher(np.eye(3)[0], 2.0), BrownianKernel(0.2), 0.2),
    ("vmf-d16", VonMisesFisher(np.eye(16)[0], 3.0), BrownianKernel(0.1), 0.25),
]


@pytest.mark.parametrize("name, pi, kernel, tau", BROWNIAN_CASES, ids=[c[0] for c in BROWNIAN_CASES])
def test_brownian_search_statistics_match_numpy(name, pi, kernel, tau):
    """Losses and cross-entropies to 1e-12 absolute, top-1 and recall@10 exactly, against the
    NumPy reference; the database spans the far tail (w down to about -1 for d = 3)."""
    rng = np.random.default_rng(20261401)
    x = pi.rvs(40, rng=rng)  # not a multiple of the query tile (32)
    xp = kernel.sample(x, rng=rng)
    y = pi.rvs(700, rng=rng)
    got = search_statistics(x, xp, y, pi, kernel, tau, GRID)
    want = _reference(x, xp, y, pi, kernel, tau, GRID)
    for key in ("loss", "ce"):
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=1e-12, err_msg=key)
    for key in ("top1", "recall"):
        np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    if name == "vmf-d3":  # pairs in the double-double range were exercised
        prof = _heat_profile(kernel, 3)
        h = np.exp(exact.log_m(pi, kernel, x[:, None], y[None]) + pi.logpdf(y)) * 4 * np.pi  # h_t(x.y)
        assert np.any(h < prof.cut)


def test_brownian_estimator_terms_match_numpy():
    """T2 and the control variates U, Wc, G of SearchEstimator._per_anchor (which use the scaled
    density ratios and their shift) against their definitions, Brownian kernel over a vMF pi."""
    name, pi, kernel, tau = BROWNIAN_CASES[0]
    rng = np.random.default_rng(20261402)
    est = SearchEstimator(pi, kernel, tau, 16)
    x = pi.rvs(40, rng=rng)
    xp = kernel.sample(x, rng=rng)
    y = pi.rvs(16, rng=rng)
    p = est._per_anchor(x, xp, y, n_rank=40)
    r = _reference(x, xp, y, pi, kernel, tau, est.grid)
    for g, k in enumerate(est.grid):
        u = r["m"][:, :k] * (r["s"][:, :k] - r["mu"][:, None])
        mm = r["m"][:, :k] - 1.0
        want = {"T2": r["ratio"][:, g], "U": u.sum(1) / k, "Wc": r["m"][:, :k].sum(1) / k - 1,
                "G": (u.sum(1) * mm.sum(1) - np.sum(u * mm, axis=1)) / k**2}
        got = {"T2": p["T2"][:, g], "U": p["cv"][:, g, 3], "Wc": p["cv"][:, g, 4], "G": p["cv"][:, g, 5]}
        for key, w in want.items():
            scale = max(1.0, float(np.max(np.abs(w))))
            np.testing.assert_allclose(got[key], w, rtol=0, atol=1e-12 * scale, err_msg=f"{key} at k = {k}")


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs at least 2 Numba threads")
def test_brownian_thread_count_invariance():
    """Bit-identical Brownian blocks with 1 and 2 Numba threads (HOUSE.md, reproducibility)."""
    cell = {**SETTINGS["brown-vmf-d3"], "setting": "brown-vmf-d3"}
    est = SearchEstimator(build_pi(cell), build_kernel(cell), cell["tau"], 1024)
    before = numba.get_num_threads()
    try:
        out = {}
        for n in (1, 2):
            numba.set_num_threads(n)
            out[n] = est.block(100, np.random.SeedSequence(20261403))
    finally:
        numba.set_num_threads(before)
    for key in out[1]:
        np.testing.assert_array_equal(out[1][key], out[2][key], err_msg=key)


# ----------------------------------------------------------------------------------------------
# the kernels are not reversible

def _cell(name):
    return {**SETTINGS[name], "setting": name}


@pytest.mark.parametrize("name", ["rot-uniform-d3", "rot-vmf-d8", "brown-vmf-d8"])
def test_detailed_balance_fails_exactly(name):
    """pi(x) M(x, y) != pi(y) M(y, x) on pairs drawn from the joint law (log ratio from the exact
    densities): far from 0 for these kernels, and exactly 0 for the reversible control."""
    cell = _cell(name)
    pi, kernel = build_pi(cell), build_kernel(cell)
    rng = np.random.default_rng(20261404)
    x = pi.rvs(200, rng=rng)
    y = kernel.sample(x, rng=rng)
    log_ratio = (pi.logpdf(x) + kernel.logpdf(x, y)) - (pi.logpdf(y) + kernel.logpdf(y, x))
    assert np.max(np.abs(log_ratio)) > 1.0
    ctl = _cell("vmf-uniform-d3")
    pi0, k0 = build_pi(ctl), build_kernel(ctl)
    x0 = pi0.rvs(200, rng=rng)
    y0 = k0.sample(x0, rng=rng)
    lr0 = (pi0.logpdf(x0) + k0.logpdf(x0, y0)) - (pi0.logpdf(y0) + k0.logpdf(y0, x0))
    np.testing.assert_allclose(lr0, 0.0, atol=1e-9)


@pytest.mark.statistical
@pytest.mark.false_fail(FLOOR, reason="one Bonferroni family of 8 two-sided z tests at FLOOR = 1e-5; the |z| > 10 checks miss with probability O(1e-100)")
def test_exchangeability_statistics():
    """Monte Carlo over 2^16 pairs (x ~ pi, x+ ~ M(x)) per kernel of the quick design:

    (a) E[f(x) g(x+)] != E[g(x) f(x+)] with f(x) = x_1, g(x) = x_2 for the rotated kernels
    (exact value 2 A_3(10) sin(2.6)/3 = 0.309 over uniform pi), and pi M != pi for the Brownian
    ones (E[x+_1] = e^{-(d-1)t/2} E[x_1] < E[x_1]): |z| against 0 beyond 10;
    (b) both statistics agree with ``asymmetry_exact`` (|z| <= 4.85: one Bonferroni family of 8
    at 1e-5); in particular the rotated kernel keeps uniform pi invariant (exact shift 0).
    Power: MCSEs are <= 0.004 while the non-zero exact values are >= 0.097, so (a) holds with
    probability 1 - O(1e-100); (b) detects an error of 0.019 in either statistic with prob. ~0.5.
    """
    crit = stats.norm.isf(FLOOR / (2 * 8))
    for i, name in enumerate(QUICK_SETTINGS):
        cell = _cell(name)
        pi, kernel = build_pi(cell), build_kernel(cell)
        rng = np.random.default_rng(20261410 + i)
        x = pi.rvs(1 << 16, rng=rng)
        xp = kernel.sample(x, rng=rng)
        cross = x[:, 0] * xp[:, 1] - x[:, 1] * xp[:, 0]
        shift = xp[:, 0] - x[:, 0]
        ex_cross, ex_shift = asymmetry_exact(pi, kernel)
        for v, ex in ((cross, ex_cross), (shift, ex_shift)):
            m, se = v.mean(), v.std(ddof=1) / math.sqrt(v.size)
            assert abs(m - ex) / se <= crit, (name, m, se, ex)
        stat = cross if cell["kernel"] == "rotated" else shift
        assert abs(stat.mean()) / (stat.std(ddof=1) / math.sqrt(stat.size)) > 10, name
        if name == "rot-uniform-d3":
            assert ex_shift == 0.0 and ex_cross == pytest.approx(2 * _a3(10.0) * math.sin(2.6) / 3, rel=1e-12)


def _a3(kappa):
    return 1.0 / math.tanh(kappa) - 1.0 / kappa


# ----------------------------------------------------------------------------------------------
# the study

@pytest.fixture(scope="module")
def quick_file(tmp_path_factory):
    """The --quick design (4 settings, k_max 8192, 48 blocks of 128 anchors) with the study's default seed."""
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["settings"].split(",") == QUICK_SETTINGS and cfg["seed"] == STUDY.default_seed
    res = run_study(STUDY, cfg, tmp_path_factory.mktemp("asymmetry") / "asymmetry.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, res.path


@pytest.fixture(scope="module")
def quick(quick_file):
    cfg, path = quick_file
    return cfg, read_dataset(path)  # what CI keeps is the file: test the file


def _summarise(study, raw, cfg) -> dict:
    """A study's summaries of ``raw`` as arrays (summarise returns ``{declared name: values}``)."""
    out = study.summarise(raw, cfg)
    assert set(out) <= set(study.schema)
    return {name: np.asarray(v) for name, v in out.items()}


@pytest.mark.statistical
@pytest.mark.false_fail((N_NULL - 8) * FLOOR + 8 * BOOTSTRAP_RATE, reason="24 component null tests (Check.pvalues): 16 "
                        "analytic at p >= 1e-5 each, 8 bootstrap (curve, dgap) above their minimum p 1e-4 (probability "
                        "about 1e-4 each); rejecting -1/2 is a matter of precision (11-216 SE), not a false-failure rate")
def test_c7_null_pvalues_quick(quick):
    """The default suite's form of the quick design's verdicts: every component null test of C1 (slope = -1,
    the MC curve and the dgap against the exact curve, c1, c2) and C2 (slope = -1) has p >= 1e-5 in every
    setting, and -1/2 is rejected at ALPHA for both. Power: a slope t(47) 4.9 SE from -1 (C1 SE 0.002-0.020,
    C2 0.014-0.15), or c1 4.9 MCSE off (2.4%-14% of c1), is detected with probability 1/2; the verdicts at
    ALPHA (3.5 SE) are test_c7_rates_quick's, in the slow suite."""
    _, ds = quick
    pv = null_pvalues(STUDY, ds)
    low = below_floor(pv, FLOOR, BOOTSTRAP_TESTS)
    assert len(pv) == N_NULL and sum(n.endswith(BOOTSTRAP_TESTS) for n in pv) == 8 and low == {}, low
    for var in ("gap", "d"):
        assert np.all(ds[f"{var}_slope_p_half"].values < ALPHA), ds[f"{var}_slope_p_half"].values


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("setting", QUICK_SETTINGS)
@pytest.mark.false_fail(2 * ALPHA + 2 * float(stats.t.sf(stats.norm.isf(ALPHA / 2), 47)) + 3 * ALPHA, reason="slow suite: two slope intervals at ALPHA, the c1 bound 3.29 on t(47) (1.9e-3), the verdict's three exact-curve tests at ALPHA (union bound)")
def test_c7_rates_quick(quick, setting):
    """Per setting, for C1 (gap_k) and C2 (D_k): one sign for k >= k_min, the level-(1 - 1e-3)
    slope interval contains -1 and excludes -1/2 (p_half < 1e-3); for C1 |c1 z| <= 3.29; both
    verdicts pass. False-failure rate 6.9e-3 per setting (two intervals at 1e-3, the c1 z-test:
    the bound is the normal 3.29, stricter than the verdict's Student t value on 47 df, so 1.9e-3;
    and the verdict's three tests against the exact curve at 1e-3 each; module doc). Rejecting -1/2 is a matter of precision, not of a false-failure rate: with the
    study-named seeds -1/2 lies 25-216 slope SEs from the C1 estimates and 11-34 from the C2 ones,
    with the quick design's former 64 Brownian queries brown-vmf-d8's C2 was 3.5 SEs (slope -1.012 +-
    0.147, p_half = 0.002 > 1e-3: it failed); the quick design then had >= 256 queries in each of 24
    C2 blocks (power calculation in Asymmetry.unit_anchors), SE 0.043, and now 48 blocks of >= 128 (the
    same queries in all).
    Power: with the quick design's slope SEs (C1 0.002-0.020, C2 0.014-0.15) a true slope 3.8 SE
    from -1 is rejected with probability 0.5; c1 off by 3.3 MCSE (1.6%-9.4% of c1) likewise."""
    _, ds = quick
    s = ds.sel(setting=setting)
    assert str(s["cell_error"].values) == ""
    q = stats.t.ppf(1 - ALPHA / 2, ds.sizes["block"] - 1)
    for var, claim in (("gap", "c1"), ("d", "c2")):
        lo, hi = float(s[f"{var}_slope_verdict_low"]), float(s[f"{var}_slope_verdict_high"])
        slope, se = float(s[f"{var}_slope"]), float(s[f"{var}_slope_se"])
        assert (lo, hi) == pytest.approx((slope - q * se, slope + q * se), rel=1e-12)
        assert lo <= -1.0 <= hi, f"{setting} {claim}: slope {slope:.4f}, interval [{lo:.4f}, {hi:.4f}]"
        assert not (lo <= -0.5 <= hi) and float(s[f"{var}_slope_p_half"]) < ALPHA
        assert float(s[f"{var}_sign"]) in (1.0, -1.0)
        assert str(s[f"verdict_{claim}"].values) == "pass", str(s[f"verdict_{claim}_reason"].values)
    assert abs(float(s["c1_z"])) <= stats.norm.isf(ALPHA / 2)
    assert str(s["verdict"].values) == "pass"


def _raw(ds, settings):
    keep = [v for v in ds.data_vars if v.startswith(("raw_", "prep_")) or v in ("cell_error", "cell_key")]
    return ds[keep].sel(setting=settings)


@pytest.mark.deterministic(reason="the same raw blocks through two implementations of one analysis: equality, for any draw")
def test_analysis_equals_rate_k_and_search_ce(quick):
    """The study's analysis is rate_k's (C1) and search_ce's (C2) on the same blocks: their own
    summarise, run on this dataset's raw blocks, gives the same slopes, intervals, p-values,
    constants, z-scores, fits, residuals and verdicts, at the same level. All three use one rule
    (simkit.stats.analysis.rate_verdict), which fits log(sign x curve): rate_k's summarise therefore also
    fits the negative gap of the rotation by 2.6 rad (c1 < 0), which its former positive-only rule
    could not. Both also test the curve against the exact curve (simkit.exact.curve.gap_curve, for these
    kernels too), the Z-free dgap and c2 (simkit.stats.analysis.truth_verdict): the same values here."""
    cfg, ds = quick
    assert ALPHA == RATE_K_ALPHA == SEARCH_CE_ALPHA
    raw1 = _raw(ds, QUICK_SETTINGS)
    assert np.all(np.isfinite(raw1["prep_gap_exact"].values))
    c1 = _summarise(RATE_K, raw1, {"k_min_factor": cfg["k_min_factor"], "seed": cfg["seed"]})
    pairs = {"slope": "gap_slope", "slope_se": "gap_slope_se", "slope_ci_low": "gap_slope_ci_low",
             "slope_ci_high": "gap_slope_ci_high", "slope_verdict_low": "gap_slope_verdict_low",
             "slope_verdict_high": "gap_slope_verdict_high", "slope_p_half": "gap_slope_p_half",
             "slope_p_one": "gap_slope_p_one", "curvature": "gap_curvature", "c1_estimate": "c1_estimate",
             "c1_estimate_mcse": "c1_estimate_mcse", "c2_estimate": "c2_estimate",
             "c2_estimate_mcse": "c2_estimate_mcse", "c1_z": "c1_z", "k_min": "gap_k_min", "gap": "gap",
             "gap_mcse": "gap_mcse", "gap_plain": "gap_plain", "dgap": "dgap", "k_gap": "k_gap",
             "fit_gap": "fit_gap_abs", "resid_rate": "resid_gap_rate", "resid_c1": "resid_c1",
             "ce_estimate": "ce_estimate", "c1_exact": "c1_exact", "expansion_scale": "c1_scale",
             "gap_exact": "gap_exact", "gap_exact_mcse": "gap_exact_mcse", "c2_exact": "c2_exact", "c2_t": "c2_t",
             "curve_max_t": "curve_max_t", "curve_p": "curve_p", "dgap_max_t": "dgap_max_t", "dgap_p": "dgap_p"}
    for theirs, ours in pairs.items():
        np.testing.assert_array_equal(c1[theirs], ds[ours].values, err_msg=theirs)
    assert c1["verdict"].tolist() == ds["verdict_c1"].values.tolist()
    assert c1["verdict_reason"].tolist() == ds["verdict_c1_reason"].values.tolist()
    rot = ds.sel(setting="rot-uniform-d3")
    assert float(rot["c1_exact"]) < 0 and float(rot["gap_sign"]) == -1.0 and np.isfinite(float(rot["gap_slope"]))

    raw2 = _raw(ds, QUICK_SETTINGS).drop_vars("raw_loss").rename({"raw_loss_search": "raw_loss"})
    # no exact D_k curve for these kernels: search_ce's curve test is then "not tested" (NaN)
    raw2["prep_d_exact"] = (("setting", "d_exact_dim0"), np.full((raw2.sizes["setting"], raw2.sizes["k"]), np.nan))
    c2 = _summarise(SEARCH_CE, raw2, {"k_min_factor": cfg["k_min_factor"], "rank_anchors": cfg["rank_anchors"],
                                      "block_anchors": cfg["block_anchors"], "seed": cfg["seed"]})
    pairs = {"slope": "d_slope", "slope_se": "d_slope_se", "slope_ci_low": "d_slope_ci_low",
             "slope_ci_high": "d_slope_ci_high", "slope_verdict_low": "d_slope_verdict_low",
             "slope_verdict_high": "d_slope_verdict_high", "slope_p_half": "d_slope_p_half",
             "slope_p_one": "d_slope_p_one", "curvature": "d_curvature", "d1_estimate": "d1_estimate",
             "d1_estimate_mcse": "d1_estimate_mcse", "d2_estimate": "d2_estimate",
             "d2_estimate_mcse": "d2_estimate_mcse", "d1_z": "d1_z", "k_min": "d_k_min", "d_sign": "d_sign",
             "k_sign": "d_k_sign", "d": "d", "d_mcse": "d_mcse", "k_d": "k_d", "fit_d_abs": "fit_d_abs",
             "resid_rate": "resid_d_rate", "resid_d1": "resid_d1", "top1": "top1", "recall": "recall",
             "d1_exact": "d1_exact", "w2_exact": "w2_exact", "expansion_scale": "c2_scale"}
    for theirs, ours in pairs.items():
        np.testing.assert_array_equal(c2[theirs], ds[ours].values, err_msg=theirs)
    # search_ce's C2 rule (protocols/search_ce.md) also tests d1 against its derived value; asymmetry's C2
    # rule tests the slope alone: the stricter rule's pass implies the other's
    for strict, ours in zip(c2["verdict"].tolist(), ds["verdict_c2"].values.tolist()):
        assert strict != "pass" or ours == "pass"


@pytest.mark.parametrize("setting", QUICK_SETTINGS)
@pytest.mark.false_fail(1e-12, reason="allowance, not computed exactly: the fail verdicts miss only if -1 were inside the transformed interval, > 10 SE away (t on 47 df); the interval and the untransformed verdict are compared with the recorded ones, identities")
def test_negative_control_sqrt_k(quick, setting):
    """Real blocks of gap_k and D_k multiplied by sqrt(k) decay as 1/sqrt(k) (true slope -1/2):
    both checks must fail with the interval excluding -1. Deterministic given the quick data: the
    transformation shifts every fitted slope, with its jackknife replicates, by exactly +1/2 (the
    WLS weights are scale-free), so it fails whenever the original slope SE is below 0.13."""
    cfg, ds = quick
    raw = _raw(ds, [setting])
    bad = raw.copy()
    for name in ("raw_gap_cv", "raw_d_cv"):
        bad[name] = raw[name] * np.sqrt(raw["k"])
    out = _summarise(STUDY, bad, cfg)
    ref = ds.sel(setting=[setting])
    for var, claim in (("gap", "c1"), ("d", "c2")):
        assert out[f"verdict_{claim}"].tolist() == ["fail"]
        assert "excludes -1" in str(out[f"verdict_{claim}_reason"][0])
        lo, hi = float(out[f"{var}_slope_verdict_low"][0]), float(out[f"{var}_slope_verdict_high"][0])
        # the recorded interval moved by +1/2: it holds -1/2 exactly when the recorded one holds -1
        ref_lo, ref_hi = float(ref[f"{var}_slope_verdict_low"][0]), float(ref[f"{var}_slope_verdict_high"][0])
        assert lo > -0.9 and (lo, hi) == pytest.approx((ref_lo + 0.5, ref_hi + 0.5), abs=1e-9), (var, lo, hi)
        assert float(out[f"{var}_slope"][0]) == pytest.approx(float(ref[f"{var}_slope"][0]) + 0.5, abs=1e-9)
    assert out["verdict"].tolist() == ["fail"]
    # the untransformed blocks give the recorded verdict (its value: test_c7_rates_quick, slow suite)
    assert _summarise(STUDY, raw, cfg)["verdict"].tolist() == ref["verdict"].values.tolist()


@pytest.mark.deterministic(reason="a constructed sign change: the rule's outcome does not depend on the draw")
def test_sign_change_in_fit_range_fails(quick):
    """A gap curve whose block means change sign for k >= k_min is not fitted; the check fails and says why."""
    cfg, ds = quick
    bad = _raw(ds, ["brown-vmf-d3"]).copy(deep=True)
    bad["raw_gap_cv"].values[..., -1] *= -1.0
    out = _summarise(STUDY, bad, cfg)
    assert out["verdict_c1"].tolist() == ["fail"] and out["verdict"].tolist() == ["fail"]
    assert "changes sign" in str(out["verdict_c1_reason"][0])
    assert float(out["gap_sign"][0]) == 0.0 and np.isnan(float(out["gap_slope"][0]))


@pytest.mark.deterministic(reason="schema, attributes, the claim rows' form and the report; the verdicts' values are test_c7_rates_quick's (slow suite)")
def test_quick_dataset_schema_claims_and_report(quick, tmp_path):
    cfg, ds = quick
    assert ds["k"].values.tolist() == [2**i for i in range(14)]
    assert ds.attrs["study"] == "asymmetry" and ds.attrs["claim"] == "C7"
    assert ds.attrs["alpha"] == ALPHA and ds.attrs["n_top"] == 10 and ds.attrs["Conventions"] == "CF-1.11"
    for name in list(ds.data_vars) + list(ds.coords):
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a), (name, a)
    for name, var in SCHEMA.items():  # the declared schema, exactly: dims and attributes
        assert name in ds.variables, name
        assert ds[name].dims == var.dims, name
        for a, v in var.attrs.items():
            assert ds[name].attrs[a] == v, (name, a)
    assert ds["kernel"].values.tolist() == ["rotated", "rotated", "brownian", "brownian"]
    assert np.all(ds.sel(setting=["brown-vmf-d3", "brown-vmf-d8"])["c1_exact_mcse"].values == 0.0)  # quadrature
    assert np.all(ds.sel(setting=["rot-uniform-d3", "rot-vmf-d8"])["c1_exact_mcse"].values > 0.0)  # Monte Carlo
    rows = STUDY.claim_rows(ds)
    assert [r["claim"] for r in rows] == ["C7", "C7"] and all(r["verdict"] in ("pass", "fail") for r in rows)
    assert rows[0]["false_fail_rate"] == pytest.approx(1 - (1 - 5 * ALPHA) ** 4)  # slope, c1, c2, curve, dgap
    assert rows[1]["false_fail_rate"] == pytest.approx(1 - (1 - ALPHA) ** 4)
    tcrit = stats.t.isf(ALPHA / 2, ds.sizes["block"] - 1)
    df = ds.sizes["block"] - 1
    assert rows[0]["statistic"].endswith(f"|c1 z| and |c2 t| <= {tcrit:.2f} (Student t, {df} df), MC curve and "
                                         "Z-free dgap against the exact curve at every k (max |t|, bootstrap reference)")
    for row, var in zip(rows, ("gap", "d")):
        slope, se = ds[f"{var}_slope"].values, ds[f"{var}_slope_se"].values
        worst = int(np.argmax(np.abs(slope + 1) / se))
        assert (row["estimate"], row["estimate_mcse"]) == (float(slope[worst]), float(se[worst]))
        assert all(f"{s}: slope" in row["detail"] for s in QUICK_SETTINGS)
    assert "brown-vmf-d8" in STUDY.summary_text(ds)
    pages = STUDY.report(ds.sel(setting=["rot-uniform-d3", "brown-vmf-d3"]), tmp_path / "r.pdf")
    assert pages >= 9 and (tmp_path / "r.pdf").stat().st_size > 10000
    with pytest.raises(ValueError, match="asymmetry dataset"):
        STUDY.report(ds.drop_vars("d"), tmp_path / "bad.pdf")
    assert not (tmp_path / "bad.pdf").exists()


@pytest.mark.slow  # the checker takes ~1 CPU-minute on this file; data/asymmetry.nc is checked in the default suite
def test_quick_dataset_cf_compliant(quick_file):
    """The written file passes ``compliance-checker -t cf:1.11 -c strict``."""
    assert_cf_strict(quick_file[1])


def test_quick_dataset_units_dimensionless(quick):
    """Every unit is one udunits reads as dimensionless (nats are '1': 'nat' would read as a pressure)."""
    assert_dimensionless(quick[1])


TINY = {"settings": "rot-uniform-d3,brown-vmf-d3", "k_max": 256, "n_blocks": 8, "block_anchors": 64,
        "search_anchors": 32, "rank_anchors": 16, "pilot_blocks": 2, "n_mc": 4096, "n_asym": 256}


def test_resume_after_interruption(tmp_path, capsys):
    """Stopped after 5 tasks (both preparations, three blocks), then completed: the dataset is
    identical to an uninterrupted run's (simkit.runner.results_identical)."""
    cfg = resolve_config(STUDY, TINY, seed=20261420)
    assert_resume_identical(STUDY, cfg, tmp_path, stop_after=5, capsys=capsys)


def test_invalid_configuration():
    with pytest.raises(ValueError, match=r"'t' = 0\.01 is too small for the search estimator"):
        resolve_config(STUDY, {"t": 0.01, "settings": "brown-vmf-d3"})
    with pytest.raises(ValueError, match="'rank_anchors' must be <= the queries per C2 block"):
        resolve_config(STUDY, {"rank_anchors": 100})  # the Brownian settings have 64 queries per block
    with pytest.raises(ValueError, match="'angle' must be <= 3.14"):
        resolve_config(STUDY, {"angle": 4.0})
    assert resolve_config(STUDY, {"rank_anchors": 100, "search_anchors": 128})["rank_anchors"] == 100
