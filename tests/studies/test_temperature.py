"""Claim C5: the closed-form KL(Q(x,.) || pi) (simkit.distributions.softmax_kernel) and the temperature study.

* Closed forms: E_Q[x.y] against a central difference of log Z(a x) in a; d/dr log C_d(r) = -A_d(r);
  uniform pi against the mutual information of vMF(x, 1/tau); Discrete pi against a direct sum;
  the bound KL <= 2/tau on random anchors and on a two-atom pi where it is tight within a factor 2.
* Monte Carlo: direct (y ~ Q(x, .)) and importance (y ~ pi) estimators against the closed form
  (H = -E_x KL(M(x,.) || pi) and the largest KL over x: tests/exact/test_divergence.py).
* Norms clause (simkit.estimators.norms, protocols/temperature.md): the pathwise derivative sum_j p_j s_j against a
  hand value and a central difference with common random numbers; the scaled risk at unit norms against
  simkit.embeddings.training.EmpiricalRisk; the population sensitivity of a fixed embedding against a 2-D quadrature;
  the one-sided growth rule on growth (passes), flat, zero and slope-only noise curves (fail); G tau and its
  MCSE from hand-made blocks; the quick rows exploratory with both controls behaving; the committed
  dataset's protocol provenance and confirmatory rows.
* The study: the quick design runs and passes its four checks (one deterministic, three statistical);
  resume after interruption gives a dataset identical to an uninterrupted run; negative controls
  (deterministic edits of real blocks) make each check fail; the precision guard of the study's
  GapEstimator; invalid inputs.

Statistical budget of the default suite's part (seeds fixed before the tests were first run, never
re-seeded): direct-form KL 1e-5, importance-form KL 1e-5 (one Bonferroni family each), the quick
design's 17 component null tests at p >= 1e-5 each (1.7e-4), norms quadrature 1e-5, growth-rule
synthetic cases 1e-4 (allowance): at most 3.0e-4 (registered per test). The quick design's verdicts
at the study's levels (3 x 1e-3, the null control's 1e-2) are in the slow suite. Each test states
its power. The quick design's random numbers come from the seed scheme of simkit.runner
(the study name is in the cell key), so they differ from the streams these tests first ran on;
no assertion below is specific to one stream.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from simkit import Discrete, Uniform, VMFKernel, exact
from simkit._jit.special import log_vmf_norm, mean_resultant_length
from simkit.distributions.designs import build_pi
from simkit.runner import read_dataset, resolve_config, run_study
from simkit.estimators.infonce import GapEstimator
from simkit.distributions.softmax_kernel import (kl_direct, kl_importance, kl_q_pi, q_components, q_distribution, q_mean_cosine,
                                   sample_q)
from simkit.exact.divergence import kl_sup
from studies.temperature import ALPHA, STUDY, Temperature

from resume_check import assert_resume_identical
from _false_fail import below_floor, null_pvalues

FLOOR = 1e-5  # the default suite's level for a test's own null comparisons (ALPHA is the study's)

statistical = pytest.mark.statistical

PIS = {
    "uniform-d3": Uniform(3),
    "vmf-d8": build_pi({"pi": "vmf", "dim": 8, "kappa_pi": 2.0}),
    "mixture-d16": build_pi({"pi": "mixture", "dim": 16, "kappa_pi": 6.0}),
}
TAUS = (0.02, 0.3, 10.0)


def unit_anchors(pi, n, seed):
    """Half from pi, half uniform: anchors in the tails of pi too."""
    rng = np.random.default_rng(seed)
    return np.concatenate([pi.rvs(n - n // 2, rng=rng), Uniform(pi.dim).rvs(n // 2, rng=rng)])


# ----------------------------------------------------------------------------------------------
# closed forms

@pytest.mark.parametrize("name", PIS)
@pytest.mark.parametrize("tau", TAUS)
def test_mean_cosine_is_derivative_of_log_partition(name, tau):
    """E_Q[x.y] = d/da log Z(a x): central difference with step 1e-4 a (truncation ~1e-8 a^2 |f'''|,
    rounding ~1e-16 log Z / h), so agreement to 1e-6 absolute checks the sign and every term."""
    pi = PIS[name]
    x = unit_anchors(pi, 16, 11)
    a = 1.0 / tau
    h = 1e-4 * a
    num = (exact.log_partition(pi, x, 1.0 / (a + h)) - exact.log_partition(pi, x, 1.0 / (a - h))) / (2 * h)
    np.testing.assert_allclose(q_mean_cosine(pi, x, tau), num, rtol=0, atol=1e-6)
    # and the KL is a E_Q[x.y] - log Z
    np.testing.assert_allclose(kl_q_pi(pi, x, tau), a * num - exact.log_partition(pi, x, tau), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("d", [3, 8, 16])
def test_log_normaliser_derivative_is_minus_mean_resultant(d):
    """d/dr log C_d(r) = -A_d(r): the sign convention the closed form rests on."""
    r = np.array([0.3, 2.0, 17.0, 120.0])
    h = 1e-5 * r
    num = (log_vmf_norm(d, r + h) - log_vmf_norm(d, r - h)) / (2 * h)
    np.testing.assert_allclose(num, -mean_resultant_length(d, r), rtol=1e-7)


@pytest.mark.parametrize("d", [3, 8])
@pytest.mark.parametrize("tau", [0.01, 0.1, 1.0, 100.0])
def test_uniform_kl_is_vmf_mutual_information(d, tau):
    """Uniform pi: Q(x, .) = vMF(x, 1/tau), KL = a A_d(a) + log C_d(a) - log C_d(0) = I of vMF(1/tau)."""
    x = unit_anchors(Uniform(d), 5, 3)
    np.testing.assert_allclose(kl_q_pi(Uniform(d), x, tau), exact.mutual_information(VMFKernel(1.0 / tau), d),
                               rtol=1e-10, atol=1e-14)
    w, nu, r = q_components(Uniform(d), x, tau)
    np.testing.assert_allclose(w, 1.0)
    np.testing.assert_allclose(nu[:, 0, :], x, atol=1e-15)
    np.testing.assert_allclose(r, 1.0 / tau, rtol=1e-15)


def test_q_components_tilt_each_vmf():
    """rho_j C_d(r_j) e^{r_j nu_j.y} summed over j equals e^{x.y/tau} pi(y) / Z(x) pointwise."""
    pi, tau = PIS["mixture-d16"], 0.2
    x = unit_anchors(pi, 3, 5)
    y = unit_anchors(pi, 7, 6)
    w, nu, r = q_components(pi, x, tau)
    np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-13)
    dens = np.einsum("im,imn->in", w, np.exp(log_vmf_norm(16, r)[:, :, None] + r[:, :, None] *
                                              np.einsum("imd,nd->imn", nu, y)))
    target = np.exp((x @ y.T) / tau + pi.logpdf(y)[None, :] - exact.log_partition(pi, x, tau)[:, None])
    np.testing.assert_allclose(dens, target, rtol=1e-9)


def test_discrete_pi_kl_direct_sum():
    rng = np.random.default_rng(7)
    pts = Uniform(5).rvs(12, rng=rng)
    w = rng.dirichlet(np.ones(12))
    w[3] = 0.0
    w /= w.sum()
    pi = Discrete(pts, w)
    x, tau = unit_anchors(Uniform(5), 4, 8), 0.15
    s = x @ pts.T / tau
    with np.errstate(divide="ignore"):
        lw = np.log(w) + s
    rho = np.exp(lw - lw.max(axis=1, keepdims=True))
    rho /= rho.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        ref = np.nansum(np.where(rho > 0, rho * np.log(rho / w), 0.0), axis=1)
    np.testing.assert_allclose(kl_q_pi(pi, x, tau), ref, rtol=1e-12, atol=1e-14)
    q = q_distribution(pi, x[0], tau)
    np.testing.assert_allclose(q.weights, rho[0], rtol=1e-12, atol=1e-300)
    y = sample_q(pi, x, tau, 50, rng=np.random.default_rng(9))
    hit = np.argmax(np.einsum("ind,jd->inj", y, pts), axis=2)  # every draw is an atom of positive Q-weight
    assert y.shape == (4, 50, 5) and np.all(np.take_along_axis(rho, hit, 1) > 0)
    np.testing.assert_allclose(np.max(np.einsum("ind,jd->inj", y, pts), axis=2), 1.0, rtol=1e-12)


def test_kl_bound_holds_and_is_tight_for_two_atoms():
    """KL(Q(x,.) || pi) <= 2/tau for every anchor, pi and tau (deterministic). For pi = eps delta_x +
    (1 - eps) delta_{-x} with eps = e^{-2a} the KL is a - log 2 + o(1): the bound is within a
    factor 2 of tight, so the inequality tested is not vacuous."""
    for name, pi in PIS.items():
        x = unit_anchors(pi, 64, 21)
        for tau in (0.005, 0.02, 0.1, 1.0, 10.0, 1000.0):
            kl = kl_q_pi(pi, x, tau)
            assert np.all(kl >= -1e-12) and np.all(kl <= 2.0 / tau), (name, tau)
            assert kl_sup(pi, tau, rng=np.random.default_rng(22)) <= 2.0 / tau
    e = np.eye(3)[0]
    for tau in (0.05, 0.2, 1.0):
        a = 1.0 / tau
        eps = np.exp(-2 * a)
        pi = Discrete(np.stack([e, -e]), [eps, 1 - eps])
        kl = float(kl_q_pi(pi, e[None, :], tau)[0])
        assert kl <= 2 * a
        assert kl == pytest.approx(a - np.log(2.0), abs=2e-3 + 3 * eps * a)


# ----------------------------------------------------------------------------------------------
# Monte Carlo against the closed form

@pytest.mark.false_fail(FLOOR, reason="Bonferroni over 36 two-sided z tests at 1e-5 in total")
@statistical
def test_kl_direct_monte_carlo_matches_closed_form():
    """Direct estimator (y ~ Q(x, .) from the exact sampler) at 3 settings x 3 tau x 4 anchors = 36
    two-sided z-tests, Bonferroni at FLOOR = 1e-5 (|z| <= 5.14). Summands are bounded, 20000 draws:
    normal theory is accurate. Power: a closed form off by 6.4 MCSE (0.6-2.3% of the KL at small tau,
    ~11-45% at tau = 10 where the KL is ~1e-3) is detected with probability 0.9."""
    zc = stats.norm.isf(FLOOR / (2 * 36))
    rng = np.random.default_rng(20261201)
    zs = []
    for name, pi in PIS.items():
        x = unit_anchors(pi, 4, 31)
        for tau in TAUS:
            est, se = kl_direct(pi, x, sample_q(pi, x, tau, 20000, rng=rng), tau)
            zs.append((est - kl_q_pi(pi, x, tau)) / se)
    zs = np.concatenate(zs)
    assert np.all(np.abs(zs) <= zc), zs


@pytest.mark.false_fail(FLOOR, reason=(
    "Bonferroni over 24 two-sided z tests at 1e-5 in total; the ESS floor is far below the ESS here"))
@statistical
def test_kl_importance_monte_carlo_matches_closed_form():
    """Importance estimator E_pi[q log q] (y ~ pi, exact Z) where its weights are light-tailed (tau =
    0.3 and 10; at tau = 0.02 the ESS is 1-400 of 20000 and normal theory fails, see
    simkit.distributions.softmax_kernel.kl_importance): 3 x 2 x 4 = 24 z-tests, Bonferroni at 1e-5 (|z| <= 5.06).
    The ESS must exceed 1000. Power: a discrepancy of 6.3 MCSE is detected with probability 0.9."""
    zc = stats.norm.isf(FLOOR / (2 * 24))
    rng = np.random.default_rng(20261202)
    zs = []
    for name, pi in PIS.items():
        x = unit_anchors(pi, 4, 32)
        for tau in (0.3, 10.0):
            est, se, ess = kl_importance(pi, x, pi.rvs(20000, rng=rng), tau)
            assert np.all(ess > 1000), (name, tau, ess)
            zs.append((est - kl_q_pi(pi, x, tau)) / se)
    zs = np.concatenate(zs)
    assert np.all(np.abs(zs) <= zc), zs


# ----------------------------------------------------------------------------------------------
# GapEstimator at small tau

def test_gap_estimator_small_tau_precision():
    """vmf-d8 at tau = 0.02: (e^{s0} + S_k)/(kZ) is tiny for some anchors at small k, where the log1p
    form would round A_k to -1 and give D_1 = -inf; GapEstimator switches to log there. D_k must be
    finite and equal l_k - log k - l_inf (computed in log space) to 1e-11, and the pilot finite."""
    pi, kernel, tau = PIS["vmf-d8"], VMFKernel(10.0), 0.02
    est = GapEstimator(pi, kernel, tau, 1024)
    p = est._per_anchor(*est._draw(2048, np.random.default_rng(5)))
    assert np.all(np.isfinite(p["D"]))
    ref = p["loss"] - p["ell_inf"][:, None] - np.log(np.asarray(est.grid, float))
    np.testing.assert_allclose(p["D"], ref, rtol=0, atol=1e-11)
    assert np.all(np.isfinite(est.calibrate(128, np.random.default_rng(6), n_blocks=2)))


# ----------------------------------------------------------------------------------------------
# invalid inputs

def test_invalid_inputs():
    pi = PIS["vmf-d8"]
    x = unit_anchors(pi, 2, 1)
    with pytest.raises(ValueError, match="'tau' must be > 0"):
        kl_q_pi(pi, x, 0.0)
    with pytest.raises(ValueError, match="'pi' must be a simkit sphere distribution"):
        kl_q_pi("uniform", x, 1.0)
    with pytest.raises(ValueError, match="'x' must have last axis of length 8"):
        kl_q_pi(pi, np.eye(3), 1.0)
    with pytest.raises(ValueError, match="'pi' must be a vMF mixture"):
        q_components(Discrete(np.eye(3)), np.eye(3)[:1], 1.0)
    with pytest.raises(ValueError, match="'x' must be one anchor"):
        q_distribution(pi, x, 1.0)
    with pytest.raises(ValueError, match="'y_q' must have shape"):
        kl_direct(pi, x, np.zeros((3, 5, 8)) + np.eye(8)[0], 1.0)
    with pytest.raises(ValueError, match="'y' must hold at least 2 draws"):
        kl_importance(pi, x, np.eye(8)[:1], 1.0)
    with pytest.raises(ValueError, match="'n' must be"):
        sample_q(pi, x, 1.0, 0, rng=1)
    with pytest.raises(ValueError, match="'tau_min' must be < tau_max"):
        resolve_config(STUDY, {"tau_min": "2", "tau_max": "1"})
    with pytest.raises(ValueError, match="'k_fixed' must be <= k_max"):
        resolve_config(STUDY, {"k_fixed": "2048"})
    with pytest.raises(ValueError, match="'tau_min' must be >= 0.005"):
        resolve_config(STUDY, {"tau_min": "0.001"})


# ----------------------------------------------------------------------------------------------
# the study: resume, quick design, negative controls

TINY = {"settings": "uniform-d3,vmf-d8", "n_tau": 3, "k_max": 64, "k_fixed": 16, "n_blocks": 4, "block_anchors": 32,
        "kl_anchors": 2, "kl_samples": 64, "n_mc": 1024, "norm_taus": "1,0.2,0.05", "norm_blocks": 3, "norm_n": 16,
        "norm_k": 4, "norm_eval": 64, "scaled_chunks": 1}


def test_resume_after_interruption(tmp_path, capsys):
    """Stopped after 5 tasks, then completed: the dataset is identical to an uninterrupted run's."""
    cfg = resolve_config(STUDY, TINY, seed=20261204)
    assert_resume_identical(STUDY, cfg, tmp_path, stop_after=5, capsys=capsys)


class _Capture(Temperature):
    """The registered study, keeping the raw dataset summarise receives (for negative controls)."""

    raw = None

    def summarise(self, raw, cfg):
        type(self).raw = raw
        return super().summarise(raw, cfg)


QUICK_SETTINGS = ["uniform-d3", "vmf-d8"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The --quick design (2 settings x 8 tau, 16 blocks; norms: 3 tau, 24 blocks) with the study's default seed
    (~25 s unloaded)."""
    cfg = resolve_config(STUDY, quick=True)
    assert cfg["settings"].split(",") == QUICK_SETTINGS and cfg["seed"] == STUDY.default_seed
    res = run_study(_Capture(), cfg, tmp_path_factory.mktemp("temperature") / "temperature.nc", progress=False)
    assert res.completed and not res.errors
    return cfg, read_dataset(res.path), _Capture.raw


@pytest.mark.false_fail(18 * FLOOR, reason=(
    "the CE check's 16 per-cell t tests and the level tests of the two norms null controls (Check.pvalues) at "
    "p >= 1e-5 each; the exact KL part and the c1 check cannot fail by chance in this design (no mixture)"))
@statistical
def test_c5_null_pvalues_quick(quick):
    """The default suite's form of the quick design's verdicts: every component null test at p >= 1e-5 (CE:
    t on 15 df, detects a CE error of 6.5 MCSE with probability 1/2, 5.5 at the verdict's level; the null
    control's level test: an E[S](tau_min) 4.3 SE above 0); the exact KL part and the c1 check pass (both
    deterministic here). The KL Monte Carlo part and the verdicts at ALPHA: test_c5_quick_checks_pass (slow)."""
    _, ds, _ = quick
    pv = null_pvalues(STUDY, ds)
    assert len(pv) == 18 and below_floor(pv, FLOOR) == {}, below_floor(pv, FLOOR)
    assert ds["verdict_kl_exact"].values.tolist() == ["pass", "pass"]
    assert ds["verdict_c1"].values.tolist() == ["pass", "pass"], ds["verdict_c1_reason"].values


@pytest.mark.slow
@pytest.mark.false_fail(1e-3, reason=(
    "slow suite; per check (kl, ce, c1): its ALPHA = 1e-3 (the KL part's exact half is deterministic)"))
@statistical
@pytest.mark.parametrize("check", ["kl", "ce", "c1"])
def test_c5_quick_checks_pass(quick, check):
    """Each check passes for both settings. False-failure rates ALPHA = 1e-3 per statistical check (see
    the study: (i) the exact part is deterministic, a claim row with no false-failure rate, and the Monte
    Carlo part is one-sided Bonferroni; (ii) Bonferroni t
    over 16 cells, |z| <= 5.49 with 15 df; (iii) fails only through the Monte Carlo c1 of mixtures, not
    in this design). Power: (ii) detects a CE error of ~7 MCSE (0.0015 nat at tau = 10, 0.5 nat at
    tau = 0.02 where the MCSE is 0.08) with probability 0.9; (i) and (iii) are shown to reject by the
    negative controls below."""
    cfg, ds, _ = quick
    assert ds["verdict_" + check].values.tolist() == ["pass", "pass"], ds["verdict_" + check + "_reason"].values
    rows = STUDY.claim_rows(ds)
    assert len(rows) == 10 and all(r["claim"] == "C5" for r in rows)
    rows = rows[:4]  # the KL / CE / c1 checks (the norms checks: test_norms_quick_rows)
    assert np.isnan(rows[0]["false_fail_rate"]) and "deterministic check" in rows[0]["statistic"]
    assert rows[0]["estimate_mcse"] == 0 and 0 < rows[0]["estimate"] <= 1
    # the Monte Carlo KL check of a proven inequality and the must-reject c1 check state no rate; CE does
    assert np.isnan(rows[1]["false_fail_rate"]) and rows[2]["false_fail_rate"] == ALPHA
    assert np.isnan(rows[3]["false_fail_rate"])
    for i in {"kl": (0, 1), "ce": (2,), "c1": (3,)}[check]:
        assert rows[i]["verdict"] == "pass", rows[i]
    if check == "kl":
        for part in ("kl_exact", "kl_mc"):
            assert ds[f"verdict_{part}"].values.tolist() == ["pass", "pass"]


@pytest.mark.deterministic(reason="exact values and inequalities between exact quantities, schema")
def test_quick_dataset_values_and_schema(quick):
    cfg, ds = quick[:2]
    assert ds["setting"].values.tolist() == QUICK_SETTINGS and ds.sizes["tau"] == 8 and ds.sizes["block"] == 16
    assert float(ds["tau"].min()) == 0.02 and float(ds["tau"].max()) == 10.0
    assert ds.attrs["study"] == "temperature" and ds.attrs["claim"] == "C5"
    for name in list(ds.data_vars) + list(ds.coords):
        for a in ("long_name", "units", "description"):
            assert ds[name].attrs.get(a), (name, a)
        assert name in STUDY.schema or name in ("block",), name
        if "nats" in ds[name].attrs["long_name"]:  # udunits reads "nat" as a pressure
            assert ds[name].attrs["units"] == "1", name
    assert not [c for c in ds.coords if "_FillValue" in ds[c].encoding]  # CF: no _FillValue on a coordinate
    summaries = [v for v in ds.data_vars if not v.startswith(("raw_", "prep_", "verdict", "cell_"))
                 and not v.endswith("_mcse") and ds[v].dims[:2] == ("setting", "tau")]
    estimates = {"ce_estimate", "kl_mean", "kl_mean_is", "kl_max", "kl_max_is", "gap", "gap_plain", "k_gap", "loss",
                 "ce_exact", "c1_exact", "kl_mean_exact", "entropy", "kl_ratio"}
    assert estimates <= set(summaries) and all(f"{v}_mcse" in ds for v in estimates)
    u = ds.sel(setting="uniform-d3")
    # docs/theory.md section 5: uniform, kappa_M = 10, tau = 0.1 lies between grid points; the exact H is -I
    assert float(u["entropy"][0]) == pytest.approx(-exact.mutual_information(VMFKernel(10.0), 3), rel=1e-12)
    assert np.all(ds["kl_max_anchor_exact"] <= ds["kl_bound"]) and np.all(ds["kl_sup_exact"] <= ds["kl_bound"])
    assert np.all(ds["ce_exact"] >= ds["entropy"])  # CE >= H
    # uniform pi: the KL does not depend on x, so the sampled anchors' exact KL equals its mean
    np.testing.assert_allclose(u["kl_max_anchor_exact"], u["kl_mean_exact"], rtol=1e-10)
    # the bias constant changes sign below 1/kappa_M and its magnitude grows (finding of the study)
    assert float(u["c1_exact"][0]) < 0 < float(u["c1_exact"].max())
    assert np.all(np.isfinite(ds["gap_exact"].sel(setting="uniform-d3")))
    assert np.all(np.isnan(ds["gap_exact"].sel(setting="vmf-d8")))
    assert "uniform-d3" in STUDY.summary_text(ds)


@pytest.mark.deterministic(reason=(
    "deterministic edits of the recorded raw blocks, each pushing its statistic past the threshold whatever the "
    "draw (the CE shift of 8 MCSE goes the way of the cell's own z); every untouched verdict is compared with the "
    "recorded one (their values: test_c5_quick_checks_pass, slow suite)"))
def test_negative_controls(quick):
    """Deterministic edits of the real raw blocks make each check fail, and only that check."""
    cfg, ds, raw = quick
    base = STUDY.summarise(raw, cfg)
    rec = {c: ds[f"verdict_{c}"].values.tolist() for c in ("kl", "ce", "c1", "kl_exact", "kl_mc")}
    assert all(base[f"verdict_{c}"].values.tolist() == rec[c] for c in rec)
    base_rows = [r["verdict"] for r in STUDY.claim_rows(ds)[:4]]

    def edited(c, i):
        return [("fail" if n == i else v) for n, v in enumerate(rec[c])]

    def rows_with(i):
        return [("fail" if n == i else v) for n, v in enumerate(base_rows)]

    # (ii) CE: shift one cell's l_inf blocks by 8 of its MCSE, away from 0 in z (|z| grows by 8 > 5.49)
    bad = raw.copy(deep=True)
    cell = 3
    sign = 1.0 if float(base["ce_z"].values[0, cell]) >= 0 else -1.0
    shift = sign * 8 * float(base["ce_estimate_mcse"].values[0, cell])
    bad["raw_ell_inf"].values[cell] += shift
    out = STUDY.summarise(bad, cfg)
    assert out["verdict_ce"].values.tolist() == edited("ce", 0) and "|z| >" in str(out["verdict_ce_reason"].values[0])
    assert out["verdict_kl"].values.tolist() == rec["kl"]
    # (i) KL: one direct estimate above 2/tau with a small MCSE at the smallest tau of vmf-d8
    bad = raw.copy(deep=True)
    c = 8  # first cell of vmf-d8: tau = 0.02
    bad["raw_kl_q"].values[c, 0, 0] = 2.0 / 0.02 + 1.0
    bad["raw_kl_q_mcse"].values[c, 0, 0] = 0.01
    out = STUDY.summarise(bad, cfg)
    assert out["verdict_kl"].values.tolist() == edited("kl", 1)
    assert "direct" in str(out["verdict_kl_reason"].values[1])
    assert out["verdict_kl_mc"].values.tolist() == edited("kl_mc", 1)
    assert out["verdict_kl_exact"].values.tolist() == rec["kl_exact"]
    rows = STUDY.claim_rows(out.assign_attrs(ds.attrs))[:4]
    assert [r["verdict"] for r in rows] == rows_with(1)
    # ... and an exact per-anchor KL above the bound: the deterministic part fails, the Monte Carlo part not
    bad = raw.copy(deep=True)
    bad["raw_kl_exact"].values[0, 1, 1] = 101.0
    out = STUDY.summarise(bad, cfg)
    assert out["verdict_kl"].values.tolist() == edited("kl", 0)
    assert out["verdict_kl_exact"].values.tolist() == edited("kl_exact", 0)
    assert out["verdict_kl_mc"].values.tolist() == rec["kl_mc"]
    assert "exact per-anchor KL exceeds 2/tau" in str(out["verdict_kl_reason"].values[0])
    rows = STUDY.claim_rows(out.assign_attrs(ds.attrs))[:4]
    assert [r["verdict"] for r in rows] == rows_with(0) and rows[0]["estimate"] > 1
    # (iii) bias: c1 at the smallest tau no larger than at tau >= 1/kappa_M; then a non-monotone scale
    bad = raw.copy(deep=True)
    bad["prep_c1"].values[0, 0] = 1.0
    out = STUDY.summarise(bad, cfg)
    assert out["verdict_c1"].values.tolist() == edited("c1", 0) and "does not exceed" in str(
        out["verdict_c1_reason"].values[0])
    bad = raw.copy(deep=True)
    bad["prep_rho"].values[9] = 0.5 * bad["prep_rho"].values[10]  # vmf-d8: E[Z2/Z^2] falls as tau falls
    out = STUDY.summarise(bad, cfg)
    assert out["verdict_c1"].values.tolist() == edited("c1", 1) and "decreases" in str(
        out["verdict_c1_reason"].values[1])


def test_report_from_quick_dataset(quick, tmp_path):
    _, ds, _ = quick
    pages = STUDY.report(ds, tmp_path / "t.pdf")
    assert pages >= 7 and (tmp_path / "t.pdf").stat().st_size > 10000
    with pytest.raises(ValueError, match="temperature dataset"):
        STUDY.report(ds.drop_vars("kl_max"), tmp_path / "bad.pdf")
    assert not (tmp_path / "bad.pdf").exists()


@pytest.mark.deterministic(reason=(
    "the failed setting's verdicts are 'error' whatever the draw; the unaffected setting is required only to "
    "reach a verdict (its value at ALPHA: test_c5_quick_checks_pass, slow suite)"))
def test_failed_preparation_gives_error_verdicts(tmp_path, monkeypatch):
    """A cell whose preparation raises: the run completes, its setting's three verdicts are 'error',
    the other setting is unaffected, and the report still renders."""
    cfg = resolve_config(STUDY, {**TINY, "settings": "uniform-d3,vmf-d8"}, seed=20261205)
    original = STUDY.prepare

    def prepare(cell, cfg_, rng):
        if cell["setting"] == "vmf-d8" and cell["tau"] == 0.02:
            raise RuntimeError("injected failure")
        return original(cell, cfg_, rng)

    monkeypatch.setattr(STUDY, "prepare", prepare)
    res = run_study(STUDY, cfg, tmp_path / "e.nc", progress=False)
    assert res.completed and len(res.errors) == 1
    ds = res.dataset
    for c in ("kl", "ce", "c1"):
        assert ds[f"verdict_{c}"].values[0] in ("pass", "fail") and ds[f"verdict_{c}"].values[1] == "error", c
        assert "task errors" in str(ds[f"verdict_{c}_reason"].values[1])
    assert "injected failure" in str(ds["cell_error"].values[1, 0])
    assert np.isnan(float(ds["ce_exact"].values[1, 0])) and np.isfinite(float(ds["ce_exact"].values[1, 1]))
    assert [r["verdict"] for r in STUDY.claim_rows(ds)[:4]] == ["error", "error", "error", "error"]
    assert ds["verdict_kl_exact"].values.tolist() == ["pass", "error"]  # the exact part is deterministic
    assert ds["verdict_kl_mc"].values[0] in ("pass", "fail") and ds["verdict_kl_mc"].values[1] == "error"
    assert STUDY.report(ds, tmp_path / "e.pdf") >= 7


# ----------------------------------------------------------------------------------------------
# the norms clause (simkit.estimators.norms; pre-registered in protocols/temperature.md)

from pathlib import Path  # noqa: E402

import xarray as xr  # noqa: E402
from scipy import integrate  # noqa: E402

from simkit.embeddings.embedding import LinearEmbedding  # noqa: E402
from simkit.estimators.norms import (NormProfile, ScaledRisk, gap_sensitivity, loss_derivative,  # noqa: E402
                                     train_scaled)
from simkit.stats.trend import growth_rule  # noqa: E402
from simkit.claims.protocol import protocol_sha256  # noqa: E402
from simkit.embeddings.training import EmpiricalRisk, TrainingSample  # noqa: E402
from simkit.stats.temperature import norm_verdicts  # noqa: E402
from studies.temperature import NORM_ALPHA, NORM_B0, PROTOCOL_PATH  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _norm_setup(beta=0.5, tau=0.1, n=32, k=6, n_fresh=256, seed=7):
    rng = np.random.default_rng(seed)
    pi, kernel = Uniform(3), VMFKernel(10.0)
    prof = NormProfile.axis(beta, 3)
    train = ScaledRisk(TrainingSample.draw(pi, kernel, n, k, rng=rng), tau, prof)
    fresh = ScaledRisk(TrainingSample.draw(pi, kernel, n_fresh, k, rng=rng), tau, prof)
    return train, fresh, LinearEmbedding.random(3, 3, rng=rng)


def test_loss_derivative_hand_value():
    """dl^eps/deps at 0 for scores (1, 2, -1): l = -1 + log(e + e^{2 e^eps} + e^{-e^eps}), so the derivative is
    (2 e^2 - e^-1) / (e + e^2 + e^-1) = 1.37565..., the softmax-weighted average of the negatives' scores."""
    e = np.e
    want = (2 * e**2 - 1 / e) / (e + e**2 + 1 / e)
    assert loss_derivative(np.array([[1.0, 2.0, -1.0]]))[0] == pytest.approx(want, rel=1e-14)
    assert want == pytest.approx(1.37565, abs=1e-5)


def test_scaled_risk_at_unit_norms_is_the_library_risk():
    """beta = 0 (r = 1): losses and gradient equal simkit.embeddings.training.EmpiricalRisk's (an independent, jitted
    implementation) to rounding; with beta > 0 the gradient matches central differences."""
    train, _, phi = _norm_setup(beta=0.0, tau=0.07)
    ref = EmpiricalRisk(train.sample, 0.07)
    np.testing.assert_allclose(train.losses(phi), ref.losses(phi), rtol=1e-12, atol=1e-14)
    v, g = train.value_and_grad(phi)
    v_ref, g_ref = ref.value_and_grad(phi)
    assert v == pytest.approx(v_ref, rel=1e-12)
    np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-12)
    train, _, phi = _norm_setup(beta=0.5, tau=0.2)
    _, g = train.value_and_grad(phi)
    h, num = 1e-6, np.empty(9)
    for i in range(9):
        d = np.zeros(9)
        d[i] = h
        num[i] = (train.value_and_grad(phi.with_params(phi.params + d))[0]
                  - train.value_and_grad(phi.with_params(phi.params - d))[0]) / (2 * h)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("tau", [1.0, 0.02])
def test_gap_sensitivity_pathwise_equals_finite_difference(tau):
    """S pathwise (sum_j p_j s_j) = the central difference of G^eps with common random numbers (h = 1e-4:
    truncation ~ (h max|s|)^2 / 6 <= 1e-4 relative at tau = 0.02); the same tuples for train and fresh give
    G = S = 0 exactly; the score-ignored component gives S = 0 up to rounding."""
    train, fresh, phi0 = _norm_setup(tau=tau)
    phi, rep = train_scaled(train, phi0)
    assert rep["converged"] and abs(rep["grad_norm"]) < 1e-6
    a = gap_sensitivity(phi, train, fresh)
    assert a.sens_fd == pytest.approx(a.sens, rel=2e-4)
    assert a.gap > 0  # an ERM's gap at this (seeded) small n; not a statistical claim
    same = gap_sensitivity(phi, train, train)
    assert same.gap == 0.0 and same.sens == 0.0
    ign = gap_sensitivity(phi, train, fresh, mode="ignored")
    assert abs(ign.sens_fd) < 1e-9 * max(1.0, abs(a.sens)) and ign.sens == 0.0
    assert ign.gap == pytest.approx(a.gap, rel=1e-12)
    np.testing.assert_allclose(train.scores(phi, 0.2, "ignored"), train.scores(phi), rtol=1e-13, atol=1e-12)
    np.testing.assert_allclose(train.scores(phi, 0.2)[:, 1:], np.exp(0.2) * train.scores(phi)[:, 1:], rtol=1e-13)


@pytest.mark.false_fail(1e-5, reason="one two-sided normal bound at 4.42")
@statistical
def test_population_sensitivity_against_quadrature():
    """Known answer: phi = identity, r = 1, k = 1, pi uniform on S^2, M = vMF(x, 10), tau = 0.5. Then
    x.x+ has density kappa e^{kappa t} / (2 sinh kappa) on [-1, 1] and x.y is uniform on [-1, 1], so
    E[dl/deps] = E[p_1 s_1] is a 2-D integral (scipy dblquad, ~1e-10). Monte Carlo over 2^17 fresh tuples
    (the estimator's population half) agrees within 4.42 MCSE: false-failure rate 1e-5; detects a bias of
    ~5 MCSE (~0.004) with probability 0.7."""
    kappa, tau = 10.0, 0.5

    def integrand(v, t):
        s0, s1 = t / tau, v / tau
        return kappa * np.exp(kappa * (t - 1)) / (1 - np.exp(-2 * kappa)) * 0.5 * s1 / (1 + np.exp(s0 - s1))

    want = integrate.dblquad(integrand, -1, 1, -1, 1, epsabs=1e-12, epsrel=1e-11)[0]
    fresh = ScaledRisk(TrainingSample.draw(Uniform(3), VMFKernel(kappa), 1 << 17, 1, rng=20261206), tau,
                       NormProfile.axis(0.0, 3))
    d = fresh.derivatives(LinearEmbedding.identity(3))
    z = (d.mean() - want) / (d.std(ddof=1) / np.sqrt(d.size))
    assert abs(z) < 4.42, (d.mean(), want, z)


@pytest.mark.false_fail(1e-4, reason=(
    "allowance, not computed exactly: synthetic noise, slope within 0.1 of -1 and level tests at "
    "NORM_ALPHA far from their thresholds"))
def test_growth_rule_passes_growth_and_rejects_controls():
    """Positive case: S = tau^-1 (1 + noise) passes with b ~ -1. Flat S fails on the slope, S = 0 is undefined
    and fails, and a curve proportional to 1/tau whose level is noise (alternating +4/tau, -2/tau: every
    jackknife replicate has slope exactly -1, so a slope-only rule would pass) fails the positivity test:
    the rule is an intersection-union test, so neither part alone decides."""
    taus = np.array([1.0, 0.5, 0.2, 0.1, 0.05, 0.02])
    rng = np.random.default_rng(11)
    good = growth_rule(taus, (1 + 0.2 * rng.standard_normal((16, 6))) / taus, b0=NORM_B0, alpha=NORM_ALPHA)
    assert good.passed and good.defined and good.b == pytest.approx(-1, abs=0.1) and good.reason == ""
    flat = growth_rule(taus, 1 + 0.2 * rng.standard_normal((16, 6)), b0=NORM_B0, alpha=NORM_ALPHA)
    assert flat.defined and not flat.passed and "not shown" in flat.reason and flat.level_p < NORM_ALPHA
    zero = growth_rule(taus, np.zeros((16, 6)), b0=NORM_B0, alpha=NORM_ALPHA)
    assert not zero.passed and not zero.defined and "undefined" in zero.reason
    sign = np.where(np.arange(8) % 2 == 0, 4.0, -2.0)[:, None] / taus
    noisy = growth_rule(taus, sign, b0=NORM_B0, alpha=NORM_ALPHA)
    assert noisy.defined and noisy.p < NORM_ALPHA and noisy.b == pytest.approx(-1, abs=1e-12)
    assert not noisy.passed and noisy.level_p > NORM_ALPHA and "tau_min" in noisy.reason
    few = growth_rule(taus, np.ones((2, 6)), b0=NORM_B0, alpha=NORM_ALPHA)
    assert not few.passed and "fewer than 3" in few.reason
    ok, bad = good, noisy
    assert norm_verdicts(ok, bad, zero, "")["norm_conclusion"] == "confirmed"
    v = norm_verdicts(ok, ok, zero, "")
    assert v["norm_null_verdict"] == "fail" and v["norm_conclusion"].startswith("not confirmed (inconclusive")
    v = norm_verdicts(bad, bad, zero, "")  # growth shown, E[S] > 0 at tau_min not: the conclusion names that part
    assert v["norm_verdict"] == "fail" and v["norm_conclusion"] == f"not confirmed ({noisy.reason})"
    assert "tau_min" in v["norm_conclusion"]
    v = norm_verdicts(flat, bad, zero, "")  # no growth: the conclusion says that instead
    assert v["norm_conclusion"] == f"not confirmed ({flat.reason})" and "tau_min" not in flat.reason
    assert norm_verdicts(ok, bad, zero, "tau = 1: boom")["norm_verdict"] == "error"


@pytest.mark.deterministic(reason="argument errors; no tolerance")
def test_norms_inputs():
    with pytest.raises(ValueError, match="'beta'"):
        NormProfile(-1.0, (1.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="'direction' must be a unit vector"):
        NormProfile(0.5, (1.0, 1.0, 0.0))
    train, fresh, phi = _norm_setup()
    with pytest.raises(ValueError, match="'mode' must be one of"):
        train.scores(phi, 0.0, "both")
    with pytest.raises(ValueError, match="'eps' must be > -log"):
        train.scores(phi, -1.0, "ignored")
    with pytest.raises(ValueError, match="'blocks' must have shape"):
        growth_rule([1.0, 0.5], np.ones((4, 3)), b0=NORM_B0, alpha=0.01)
    with pytest.raises(ValueError, match="same tau"):
        gap_sensitivity(phi, train, ScaledRisk(fresh.sample, 0.3, fresh.profile))
    with pytest.raises(ValueError, match="'norm_taus'"):
        STUDY.check_config(resolve_config(STUDY, {"norm_taus": "1,0.5"}))


@pytest.mark.slow
@pytest.mark.false_fail(0.01, reason=(
    "slow suite: the null control must not pass: the rule passes on it with probability <= NORM_ALPHA = 0.01"))
@statistical
def test_norms_null_control_quick(quick):
    """The quick design's null control does not pass the rule at its level 0.01 (its level test at p >= 1e-5:
    test_c5_null_pvalues_quick, default suite)."""
    _, ds, _ = quick
    assert STUDY.claim_rows(ds)[5]["verdict"] == "pass"


@pytest.mark.deterministic(reason=(
    "labels, the score-ignored control (S = 0 exactly) and the stored rule fields recomputed from the stored blocks; "
    "the null control's verdict is test_norms_null_control_quick's (slow)"))
def test_norms_quick_rows(quick):
    """The quick design's norms rows are exploratory (never confirmatory); the score-ignored control behaves
    deterministically (S = 0). The stored rule fields equal growth_rule recomputed from the raw blocks."""
    _, ds, _ = quick
    rows = STUDY.claim_rows(ds)[4:7]
    assert [r["analysis"] for r in rows] == ["exploratory"] * 3
    assert rows[1]["verdict"] in ("pass", "fail") and rows[2]["verdict"] == "pass", rows
    assert np.isnan(rows[2]["false_fail_rate"]) and rows[1]["false_fail_rate"] == NORM_ALPHA
    assert np.all(np.abs(ds["raw_norm_sens_ignored"].values) < 1e-9)
    r = growth_rule(ds["tau_n"].values, ds["raw_norm_sens_cv"].values.T, b0=NORM_B0, alpha=NORM_ALPHA)
    assert float(ds["norm_primary_b"]) == r.b and float(ds["norm_primary_level_p"]) == r.level_p
    np.testing.assert_allclose(ds["norm_gap_tau"], ds["tau_n"] * ds["norm_gap_cv"], rtol=1e-15)
    assert ds.sizes["norm_block"] == 24 and "norms clause" in STUDY.summary_text(ds)


def test_committed_dataset_records_the_protocol():
    """data/temperature.nc (the confirmatory run) names protocols/temperature.md and
    protocols/temperature_scaled.md with their current hashes; the norms rows of both are confirmatory, the
    KL / CE / c1 rows exploratory."""
    path = ROOT / "data" / "temperature.nc"
    ds = read_dataset(path)
    assert ds.attrs["protocol_path"] == PROTOCOL_PATH
    assert ds.attrs["protocol_sha256"] == protocol_sha256(PROTOCOL_PATH)
    assert ds.attrs["protocol_commit"] not in ("absent", "uncommitted", "unknown")
    rows = STUDY.claim_rows(ds)
    assert [r["analysis"] for r in rows[:4]] == ["exploratory"] * 4
    assert all(r["analysis"].startswith(f"confirmatory ({PROTOCOL_PATH}, sha256 ") for r in rows[4:7])
    assert ds.sizes["norm_block"] == 64 and ds.sizes["tau_n"] == 6
    # the scaled rule's rows: confirmatory for protocols/temperature_scaled.md, its 384 blocks x 3 tau
    assert ds.attrs["protocol_scaled_sha256"] == protocol_sha256(SCALED_PROTOCOL)
    assert all(r["analysis"].startswith(f"confirmatory ({SCALED_PROTOCOL}, sha256 ") for r in rows[7:])
    assert ds.sizes["scaled_block"] == 384 and ds["tau_s"].values.tolist() == [1.0, 0.5, 0.2]


# ----------------------------------------------------------------------------------------------
# the scaled rule (protocols/temperature_scaled.md): tau S, its own blocks

from simkit.estimators.norms import norm_block  # noqa: E402
from simkit.runner import common_seeds  # noqa: E402
from simkit.stats.temperature_scaled import scaled_growth_rule  # noqa: E402
from studies.temperature import P_NORM, SCALED_PROTOCOL, SCALED_SEED_GROUP  # noqa: E402


@pytest.mark.deterministic(reason=(
    "one block recomputed from its seeds (same arithmetic), stored rule fields from the stored blocks; the null "
    "control's level test is counted in test_c5_null_pvalues_quick"))
def test_scaled_quick_rows_and_block_seeds(quick):
    """The quick design's scaled cells: 24 blocks x tau (1, 0.5, 0.2), block i from the seed group
    "norms-scaled" (recomputed here with norm_block for the last block, which the reshaping from chunk-major
    cells must put at column 23), disjoint from the norms design's blocks; the stored rule equals
    scaled_growth_rule on the stored blocks; the rows are exploratory, the score-ignored control passes."""
    cfg, ds, _ = quick
    taus = ds["tau_s"].values
    assert taus.tolist() == [1.0, 0.5, 0.2] and ds.sizes["scaled_block"] == 24
    seeds = common_seeds(cfg["seed"], "temperature", SCALED_SEED_GROUP, 23, 3)
    want = norm_block(cfg["norm_kappa_m"], 0.5, cfg["norm_beta"], cfg["norm_n"], cfg["norm_k"], cfg["norm_eval"],
                      seeds, dim=P_NORM, maxiter=cfg["norm_maxiter"])
    assert float(ds["raw_scaled_sens_cv"].values[1, 23]) == want["sens_cv"]
    assert float(ds["raw_scaled_gap"].values[1, 23]) == want["gap"]
    # tau = 1 is in both designs: different seeds give different blocks
    assert not np.any(ds["raw_scaled_gap"].values[0, :24] == ds["raw_norm_gap"].values[0, :24])
    r = scaled_growth_rule(taus, ds["raw_scaled_sens_cv"].values.T, b0=NORM_B0, alpha=NORM_ALPHA)
    assert float(ds["scaled_primary_b"]) == r.b and float(ds["scaled_primary_level_p"]) == r.level_p
    np.testing.assert_allclose(ds["scaled_sens_tau"], taus * ds["scaled_sens_cv"], rtol=1e-15)
    rows = STUDY.claim_rows(ds)[7:]
    assert [r_["analysis"] for r_ in rows] == ["exploratory"] * 3 and rows[2]["verdict"] == "pass"
    assert all(SCALED_PROTOCOL in r_["statistic"] for r_ in rows) and "scaled rule" in STUDY.summary_text(ds)
    assert str(ds["scaled_conclusion"].values) != ""


@pytest.mark.deterministic(reason="blocks recomputed from their seeds (same arithmetic); no tolerance")
def test_scaled_chunks_map_to_global_blocks(tmp_path):
    """Two chunks of norm_blocks = 3 (the study's block grid is 4 wide: block 3 of a chunk is skipped):
    scaled block i = 3 chunk + b, recomputed from its seeds for i = 4 (chunk 1, block 1) at tau = 0.2."""
    cfg = resolve_config(STUDY, {**TINY, "scaled_chunks": "2", "scaled_taus": "1,0.2"}, seed=20261204)
    res = run_study(STUDY, cfg, tmp_path / "t.nc", progress=False)
    ds = read_dataset(res.path)
    assert res.completed and ds.sizes["scaled_block"] == 6 and np.all(np.isfinite(ds["raw_scaled_sens_cv"].values))
    want = norm_block(cfg["norm_kappa_m"], 0.2, cfg["norm_beta"], cfg["norm_n"], cfg["norm_k"], cfg["norm_eval"],
                      common_seeds(cfg["seed"], "temperature", SCALED_SEED_GROUP, 4, 3), dim=P_NORM,
                      maxiter=cfg["norm_maxiter"])
    assert float(ds["raw_scaled_sens_cv"].values[1, 4]) == want["sens_cv"]
    assert len(set(ds["raw_scaled_gap"].values[0].tolist())) == 6  # six distinct blocks
