"""Tests of the study ``encoders`` (studies/encoders.py): C1, C2 and C7 at InfoNCE-trained encoders.

Statistical budget of the default suite's part (fixed seeds, no reruns): the quick run's 10 C1
component null tests (2 settings x 5, Check.pvalues) at p >= 1e-5 each, 1e-4; the D_k slope of
lin-d8-vmf at p >= 1e-5; the Z check against quadrature, 8 anchors at |z| <= 4.42 (two-sided 1e-5
each), 8e-5; rule R on synthetic curves at 1e-5. The quick run's verdicts at ALPHA = 1e-3 (C1: 2 x 5
x 1e-3 = 1e-2; the D_k rate 1e-3) are in the slow suite. Power: the quick run's slope SEs are <= 0.003, so a
true slope of -1/2 is rejected with probability ~1 (> 150 SE away). Negative controls: a 1/sqrt(k)
curve, c1 perturbed by 5% and the exact curve by 10% are each rejected (at 5% the joint curve test
gave p = 0.0019 in one setting: near its power limit at the quick run's 24 blocks). The Z check
detects a relative error in Z of ~4.4 x CV(e^s) / sqrt(N), ~0.3 at N = 256, per anchor (a check that
pi_N approximates the continuous mixture, exact arithmetic on both sides). The diagnose comparison
is deterministic (rtol 1e-8).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

from simkit.stats.analysis import rate_verdict, truth_rng, truth_verdict
from simkit.diagnose import diagnose
from simkit.estimators.finite import retrieval_terms, sample_rows
from simkit.exact.finite import exact_constants, log_weights
from simkit.exact.quadrature import log_partition
from simkit.runner import read_dataset, resolve_config, run_study
from simkit.embeddings.perturbation import collapse_output
from simkit.stats.retrieval import retrieval_change
from simkit.stats.trend import sqrt_k_term_test
from studies import encoders
from studies.encoders import ALPHA, N_C1_TESTS, STUDY, TAU
from _false_fail import BOOTSTRAP_RATE, BOOTSTRAP_TESTS, below_floor, null_pvalues

Z_CRIT = stats.norm.isf(1e-5 / 2)  # 4.42
FLOOR = 1e-5  # the default suite's level for a test's own null comparisons (ALPHA is the study's)
CHECKER = Path(sys.executable).parent / "compliance-checker"


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    cfg = resolve_config(STUDY, quick=True)
    path = tmp_path_factory.mktemp("encoders") / "encoders.nc"
    res = run_study(STUDY, cfg, path, progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path), res.path


def _phi(ds, i, ckpt=-1):
    cell = STUDY.cells({"settings": str(ds["setting"].values[i])})[0]
    return encoders.make_embedding(cell["encoder"], cell["dim"], ds["prep_theta"].values[i, ckpt]), cell


def test_quick_declared_variables_have_cf_attributes(quick):
    _, ds, _ = quick
    for name, var in STUDY.schema.items():
        assert name in ds.variables, name
        for key in ("long_name", "units", "description"):
            assert str(ds[name].attrs.get(key, "")).strip(), (name, key)
        assert ds[name].attrs["units"] != "nat"
    assert ds.attrs["Conventions"] == "CF-1.11"


@pytest.mark.false_fail(2 * (N_C1_TESTS - 2) * FLOOR + 4 * BOOTSTRAP_RATE, reason="2 quick settings x the verdict's "
                        "N_C1_TESTS component null tests (Check.pvalues): the analytic ones at p >= 1e-5 each, the 2 "
                        "bootstrap ones (curve, dgap) above their minimum p 1e-4 (probability about 1e-4 each); "
                        "rejecting -1/2 (350 SE away) is negligible")
def test_quick_c1_null_pvalues(quick):
    """The default suite's form of test_quick_c1_verdicts_pass: every C1 component null test (slope, c1, c2, curve,
    dgap) at p >= 1e-5 and -1/2 rejected at ALPHA. Power: a slope, c1 or c2 t on 23 df 5.6 SE from its null value
    is detected with probability 1/2 (3.8 SE at the verdict's ALPHA)."""
    _, ds, _ = quick
    pv = null_pvalues(STUDY, ds)
    low = below_floor(pv, FLOOR, BOOTSTRAP_TESTS)
    assert len(pv) == 2 * N_C1_TESTS and sum(n.endswith(BOOTSTRAP_TESTS) for n in pv) == 4 and low == {}, low
    assert np.all(ds["slope_p_half"].values < ALPHA)


@pytest.mark.slow
@pytest.mark.false_fail(2 * N_C1_TESTS * ALPHA, reason="slow suite: 2 quick settings x the verdict's N_C1_TESTS tests at ALPHA (union bound); rejecting -1/2 (350 SE away) is negligible")
def test_quick_c1_verdicts_pass(quick):
    _, ds, _ = quick
    for i, s in enumerate(ds["setting"].values):
        assert str(ds["verdict"].values[i]) == "pass", (s, str(ds["verdict_reason"].values[i]))
        assert ds["slope_p_half"].values[i] < ALPHA
        assert ds["curve_p"].values[i] >= ALPHA and ds["dgap_p"].values[i] >= ALPHA
    rows = STUDY.claim_rows(ds) if hasattr(STUDY, "claim_rows") else None
    if rows is not None:
        assert [r["claim"] for r in rows] == ["C1", "C2", "C2", "C7", "C2", "C2", "C7"]


@pytest.mark.deterministic(reason="the stated rates are functions of the design, not of the draw")
def test_claim_rows_state_false_failure_rates_only(quick):
    """The retrieval check's one-sided tests must reject to pass, so ALPHA is their false-pass rate and the
    row states no false-failure rate (NaN); C7's stated rate counts its C1 and D_k tests only."""
    _, ds, _ = quick
    rows = STUDY.claim_rows(ds)
    n_rot = sum(str(k) == "rot" for k in ds["kernel"].values)
    assert np.isnan(rows[2]["false_fail_rate"]) and "false-pass rate" in rows[2]["statistic"]
    assert rows[3]["false_fail_rate"] == pytest.approx(1 - (1 - (N_C1_TESTS + 1) * ALPHA) ** max(1, n_rot))
    assert rows[1]["false_fail_rate"] == pytest.approx(1 - (1 - ALPHA) ** ds.sizes["setting"])


@pytest.mark.false_fail(FLOOR, reason="one two-sided t test of D_k slope = -1 at p >= 1e-5 (23 df)")
def test_quick_d2_slope_null_pvalue_for_the_linear_vmf_setting(quick):
    """The default suite's form of the next test: D_k's slope at lin-d8-vmf is within t_{1 - 5e-6; 23} = 5.6 SE
    of -1 (detected with probability 1/2 beyond; 3.8 SE at the verdict's ALPHA) and -1/2 is rejected at ALPHA."""
    _, ds, _ = quick
    i = list(ds["setting"].values).index("lin-d8-vmf")
    t = (float(ds["d2_slope"].values[i]) + 1.0) / float(ds["d2_slope_se"].values[i])
    assert 2 * stats.t.sf(abs(t), ds.sizes["block"] - 1) >= FLOOR, t
    assert float(ds["d2_slope_p_half"].values[i]) < ALPHA


@pytest.mark.slow
@pytest.mark.false_fail(ALPHA, reason="slow suite: one D_k slope interval at ALPHA")
def test_quick_d2_rate_passes_for_the_linear_vmf_setting(quick):
    """D_k's rate at lin-d8-vmf (its constant is clearly positive there; at mlp-d32-rot the curve changes
    sign in the fit range and the log-log rule cannot be applied, see the report)."""
    _, ds, _ = quick
    i = list(ds["setting"].values).index("lin-d8-vmf")
    assert str(ds["d2_verdict"].values[i]) == "pass", str(ds["d2_verdict_reason"].values[i])


@pytest.mark.deterministic(reason="the optimiser lowers the training risk on its fixed sample; the CE decrease's p-value underflows to 0 in the quick run (a must-reject test far beyond its noise)")
def test_training_lowers_the_risk_and_exact_ce(quick):
    """Deterministic: the training risk at the last checkpoint is below the start's in every setting."""
    _, ds, _ = quick
    risk = ds["prep_train_risk"].values
    assert np.all(risk[:, -1] < risk[:, 0])
    assert np.all(ds["ret_ce_p"].values < ALPHA)  # CE(M_hat, Q_hat) falls (the pre-stated test's part iii)


@pytest.mark.false_fail(FLOOR, reason="the fake curve's block mean is exactly c1/sqrt(k) (slope -1/2 by construction); the real "
                        "blocks' slope within the level-(1 - 1e-5) interval of -1 (the verdict itself: "
                        "test_quick_c1_verdicts_pass, slow)")
def test_negative_control_sqrt_k_curve_fails(quick):
    """A curve decaying as 1/sqrt(k), with the quick run's own block noise, through the same rule."""
    cfg, ds, _ = quick
    i = 0
    k = ds["k"].values.astype(float)
    blocks = ds["raw_gap_cv"].values[i]
    c1 = float(ds["c1_exact"].values[i])
    fake = blocks - blocks.mean(axis=0) + c1 / np.sqrt(k)
    r = rate_verdict(k, fake, float(ds["expansion_scale"].values[i]), cfg["k_min_factor"], c1, 0.0, alpha=ALPHA,
                     test_constant=True)
    assert r["verdict"] == "fail"
    assert r["slope_verdict_high"] < -0.4 and r["slope_verdict_low"] > -0.6  # it finds -1/2
    real = rate_verdict(k, blocks, float(ds["expansion_scale"].values[i]), cfg["k_min_factor"], c1, 0.0,
                        alpha=FLOOR, test_constant=True)
    assert real["slope_verdict_low"] <= -1.0 <= real["slope_verdict_high"], real["reason"]


@pytest.mark.parametrize("factor", [0.95, 1.05])
@pytest.mark.false_fail(1e-5, reason="c1 +-5% is 8-10 MCSE of the quick run's c1 (MCSE 0.5-0.6%) against the critical ~3.8: miss ~1e-6 per setting")
def test_negative_control_perturbed_c1_fails(quick, factor):
    cfg, ds, _ = quick
    k = ds["k"].values.astype(float)
    for i in range(ds.sizes["setting"]):
        blocks = ds["raw_gap_cv"].values[i]
        c1 = float(ds["c1_exact"].values[i]) * factor
        r = rate_verdict(k, blocks, float(ds["expansion_scale"].values[i]), cfg["k_min_factor"], c1, 0.0, alpha=ALPHA,
                         test_constant=True)
        assert r["verdict"] == "fail" and "c1 z-score" in r["reason"]


@pytest.mark.parametrize("factor", [0.9, 1.1])
@pytest.mark.false_fail(1e-4, reason="allowance, not computed exactly: with Hotelling at 5% one setting gave p = 0.0019, and the max |t| of a 10% shift at every k is > 10 SE")
def test_negative_control_perturbed_exact_curve_fails(quick, factor):
    """The study's curve test (max |t| over k, bootstrap reference, as the study runs it) against an exact
    curve scaled by 10% (with the former Hotelling test, 5% gave p = 0.0019 in one quick setting: the joint
    test over every k with 24 blocks has less power than the c1 test)."""
    cfg, ds, _ = quick
    k = ds["k"].values.astype(float)
    for i in range(ds.sizes["setting"]):
        blocks = ds["raw_gap_cv"].values[i]
        fields, problems = truth_verdict(k, blocks, ds["raw_dgap_cv"].values[i], ds["gap_exact"].values[i] * factor,
                                         None, (float(ds["c2_estimate"].values[i]), float(ds["c2_estimate_mcse"].values[i])),
                                         (float(ds["c2_exact"].values[i]), 0.0), alpha=ALPHA, reference="max-t",
                                         rng=truth_rng(cfg["seed"], str(ds["setting"].values[i])))
        assert fields["curve_p"] < ALPHA and any("exact curve" in p for p in problems)


@pytest.mark.deterministic(reason="last checkpoint = first: the paired differences are exactly 0, so the rule cannot reject")
def test_negative_control_no_retrieval_improvement_fails(quick):
    """The pre-stated retrieval rule (simkit.stats.retrieval) on blocks whose last checkpoint equals the first."""
    cfg, ds, _ = quick
    raw = ds.copy(deep=True)
    for name in ("ce", "top1", "recall10"):
        raw[f"raw_ret_{name}"].values[:, :, -1] = raw[f"raw_ret_{name}"].values[:, :, 0]
    out = retrieval_change({n: raw[f"raw_ret_{n}"].values for n in ("ce", "top1", "recall10")},
                           raw["prep_train_risk"].values, ALPHA)
    assert all(v == "fail" for v in out["ret_verdict"])


def test_exact_constants_against_diagnose_at_a_trained_encoder(quick):
    """simkit.exact.finite.exact_constants against simkit.diagnose (an independent implementation) for an index
    kernel (M(x_i, .) uniform over listed atoms) at the quick run's trained encoder."""
    _, ds, _ = quick
    i = list(ds["setting"].values).index("mlp-d32-rot")
    phi, _ = _phi(ds, i)
    atoms = ds["prep_atoms"].values[i]
    n = atoms.shape[0]
    rng = np.random.default_rng(12)
    pos = rng.integers(n, size=(n, 3))
    w = np.zeros((n, n))
    for r in range(3):
        np.add.at(w, (np.arange(n), pos[:, r]), 1.0 / 3)
    with np.errstate(divide="ignore"):
        log_w = np.log(w)
    f = phi(atoms)
    ks = np.array([1, 2, 4, 8, 16, 32, 64])
    mine = exact_constants(f, log_w, TAU, ks)
    ref = diagnose(f, positives=pos, tau=TAU, k_grid=tuple(ks), n_anchors=n, n_exact_anchors=n, n_tuples=n * 16,
                   convention="include_anchor", rng=0)
    for name in ("ce", "c1", "c2"):
        assert mine[name] == pytest.approx(float(ref[name]), rel=1e-8, abs=1e-10), name
    np.testing.assert_allclose(mine["gap_exact"], ref["gap_exact"].values, rtol=1e-7, atol=1e-12)


@pytest.mark.false_fail(8 * 2 * float(stats.norm.sf(Z_CRIT)), reason="8 anchors, each a two-sided normal bound at Z_CRIT = 4.42 (1e-5)")
def test_log_z_of_the_atoms_against_quadrature_of_the_mixture(quick):
    """Z of pi_N (mean over the N atoms) against Z of the continuous vMF mixture by quadrature on S^2
    (simkit.exact.quadrature.log_partition with the trained encoder): the atoms are i.i.d. from the mixture,
    so Z_N(x) is unbiased with standard error sd(e^s)/sqrt(N) at each fixed anchor."""
    _, ds, _ = quick
    i = list(ds["setting"].values).index("mlp-d32-rot")
    phi, cell = _phi(ds, i)
    pi, _ = encoders.build_population(cell["kernel"])
    atoms = ds["prep_atoms"].values[i]
    x = pi.rvs(8, rng=np.random.default_rng(3))
    log_zq = log_partition(pi, x, TAU, phi)
    e = np.exp(phi(x) @ phi(atoms).T / TAU)
    z_n, se = e.mean(axis=1), e.std(axis=1, ddof=1) / np.sqrt(atoms.shape[0])
    z = (z_n - np.exp(log_zq)) / se
    assert np.all(np.abs(z) <= Z_CRIT), z
    # and the stored per-atom log Z of the study is the exact log mean over the atoms
    f = phi(atoms)
    np.testing.assert_allclose(ds["prep_log_z"].values[i], logsumexp(f @ f.T / TAU, axis=1) - np.log(len(f)),
                               rtol=0, atol=1e-12)


def test_retrieval_terms_by_hand():
    """top-1, recall@10 and CE(M_hat, Q_hat) on a database of 12 points with known scores and weights."""
    rng = np.random.default_rng(5)
    f = rng.normal(size=(13, 4))
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    log_w = np.log(rng.dirichlet(np.ones(13), size=1))
    db = np.arange(1, 13)
    out = retrieval_terms(f, log_w, np.array([0]), db, 1.0)
    s = f[0] @ f[db].T
    m = np.exp(log_w[0, db]) / np.exp(log_w[0, db]).sum()
    q = np.exp(s) / np.exp(s).sum()
    assert out["ce"] == pytest.approx(-np.sum(m * np.log(q)), rel=1e-12)
    best = np.argmax(m)
    assert out["top1"] == float(np.argmax(s) == best)
    assert out["recall10"] == float(best in np.argsort(-s)[:10])


def test_log_weights_rows_are_laws_and_favour_the_kernel_mean():
    pi, kernel = encoders.build_population("rot")
    atoms = pi.rvs(300, rng=np.random.default_rng(1))
    lw = log_weights(pi, kernel, atoms)
    np.testing.assert_allclose(np.exp(logsumexp(lw, axis=1)), 1.0, rtol=1e-12)
    # positives drawn from M_N are closer to R x than to x on average (the kernel is rotated)
    idx = sample_rows(lw, np.random.default_rng(2))
    rx = atoms @ kernel.rotation.T
    assert np.mean(np.sum(rx * atoms[idx], axis=1)) > np.mean(np.sum(atoms * atoms[idx], axis=1)) + 0.1


@pytest.mark.slow  # ~1 CPU-minute; the committed data/encoders.nc is checked in the default suite (test_datasets_cf)
def test_compliance_checker_strict_passes_on_the_quick_file(quick):
    _, _, path = quick
    cmd = [str(CHECKER)] if CHECKER.exists() else [sys.executable, "-m", "compliance_checker.cfutil"]
    proc = subprocess.run([*cmd, "-t", "cf:1.11", "-c", "strict", str(path)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_bad_config_is_refused():
    with pytest.raises(ValueError, match="'k_ret' must be <= k_max"):
        STUDY.check_config({"k_ret": 4096, "k_max": 1024})
    with pytest.raises(ValueError, match="'kernel' must be 'vmf' or 'rot'"):
        encoders.build_population("brownian")


# ----------------------------------------------------------------------------------------------
# the pre-registered rules R and L (protocols/encoders.md)

def _blocks(curve, k, n=48, noise=1e-4, seed=0):
    rng = np.random.default_rng(seed)
    return curve[None, :] + noise * rng.standard_normal((n, k.size)) / np.sqrt(k)[None, :]


@pytest.mark.false_fail(2 * FLOOR, reason="two synthetic curves with C2's form, each a two-sided t at 1e-5 on 47 df")
def test_rule_r_passes_on_1_over_k_curves_with_a_large_second_order_term():
    """d1 near 0 with a big b/k^2 term (the rotated MLP cells' shape) and d1 = 2: no 1/sqrt(k) term. The rule
    at level 1e-5 (its alpha is a parameter): it detects a 1/sqrt(k) coefficient 5.0 SE from 0 with probability
    1/2; its rejection of a real 1/sqrt(k) curve is the next test."""
    k = 2.0 ** np.arange(13)
    for a, b in ((0.0, -40.0), (2.0, -30.0)):
        r = sqrt_k_term_test(k, _blocks(a / k + b / k**2, k, noise=1e-3), 64, alpha=FLOOR, power=encoders.R_POWER)
        assert r["verdict"] in ("pass", "not assessed"), r
        assert abs(r["t"]) <= stats.t.ppf(1 - FLOOR / 2, 47)
    r = sqrt_k_term_test(k, _blocks(2.0 / k - 30 / k**2, k, noise=1e-3), 64, alpha=FLOOR, power=encoders.R_POWER)
    assert r["verdict"] == "pass" and r["a"] == pytest.approx(2.0, abs=5 * r["a_se"])


@pytest.mark.deterministic(reason="the fake curve's 1/sqrt(k) term is > 100 SE from 0")
def test_rule_r_negative_control_a_1_over_sqrt_k_curve_fails():
    k = 2.0 ** np.arange(13)
    r = sqrt_k_term_test(k, _blocks(1.0 / np.sqrt(k) + 2.0 / k, k), 64, alpha=ALPHA, power=encoders.R_POWER)
    assert r["verdict"] == "fail" and r["c"] == pytest.approx(1.0, rel=0.01)


@pytest.mark.deterministic(reason="a curve at 1e-9 with noise 1e-4: the MDE is > 1000x the matched term")
def test_rule_r_without_power_is_not_assessed():
    k = 2.0 ** np.arange(13)
    r = sqrt_k_term_test(k, _blocks(1e-9 / k, k, noise=1e-2), 64, alpha=ALPHA, power=encoders.R_POWER)
    assert r["verdict"] == "not assessed" and r["mde"] > r["c_match"]


@pytest.mark.false_fail(1e-6, reason="20000 simulated paired t tests: the simulated power has sd <= 0.0036, "
                        "the tolerance 0.02 is > 5 sd")
def test_planned_power_against_a_simulated_paired_t_test():
    """The protocol's planned power (0.970 per cell at the default design, 0.232 at quick) against a
    direct simulation of the one-sided paired t test with normal differences."""
    assert encoders.planned_power(48, 256, ALPHA) == pytest.approx(0.970, abs=5e-4)
    assert encoders.planned_power(24, 128, ALPHA) == pytest.approx(0.232, abs=5e-4)
    rng = np.random.default_rng(7)
    for n, anchors in ((48, 256), (24, 128)):
        sd = encoders.PLANNED_SD_256 * np.sqrt(256 / anchors)
        d = encoders.MARGIN + sd * rng.standard_normal((20000, n))
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
        sim = float(np.mean(t > stats.t.ppf(1 - ALPHA, n - 1)))
        assert sim == pytest.approx(encoders.planned_power(n, anchors, ALPHA), abs=0.02)


@pytest.mark.deterministic(reason="construction: the rank-one part dominates the 0.05 noise")
def test_collapsed_start_maps_most_points_near_plus_or_minus_u():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2000, 3))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    for enc, d in (("lin", 8), ("mlp", 32)):
        init = encoders.make_embedding(enc, d, rng=np.random.default_rng(1))
        far = collapse_output(init, encoders.FAR_NOISE, rng=np.random.default_rng(2))
        f = far(x)
        g = np.abs(f @ f.T)
        # most pairs are nearly parallel or antiparallel: the scores barely separate points
        assert np.median(g) > 0.9, enc
        assert np.median(np.abs(init(x) @ init(x).T)) < 0.7, enc  # control: the random start is not collapsed


@pytest.mark.false_fail(1e-3, reason="rule L's one-sided paired t at ALPHA in the one quick vMF cell (its top-1 "
                        "rise from the collapsed start is ~8 MCSE)")
def test_quick_rules_r_and_l(quick):
    """Quick design: L passes in lin-d8-vmf, the rotated cell is not tested; R's fields are finite; L's
    stated rate at the quick design (one cell, 24 blocks of 128 anchors) is 1 - 0.232 (not assessed by
    simkit validate); the rule L rows name the protocol."""
    _, ds, _ = quick
    names = list(ds["setting"].values)
    i, j = names.index("lin-d8-vmf"), names.index("mlp-d32-rot")
    assert str(ds["far_verdict"].values[i]) == "pass" and str(ds["far_verdict"].values[j]) == "not tested"
    assert ds["far_risk_fall"].values[i] >= encoders.MIN_RISK_FALL
    assert np.all(np.isfinite(ds["r_c"].values)) and np.all(np.isfinite(ds["r_mde"].values))
    rows = STUDY.claim_rows(ds)
    assert rows[5]["false_fail_rate"] == pytest.approx(1 - encoders.planned_power(24, 128, ALPHA))
    assert "protocols/encoders.md" in rows[4]["statistic"] and rows[4]["analysis"] == "exploratory"  # quick
