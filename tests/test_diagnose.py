"""simkit.diagnose and ``simkit diagnose`` (issue 12, item 3).

Expected values are computed here independently of simkit.diagnose's code path: plain loops and
``math.exp`` over every InfoNCE tuple (brute-force enumeration), Z and m1 by direct sums, and a
brute-force Monte Carlo of the augmentation case with fresh views. Statistical checks use fixed
seeds and state their false-failure rates (normal approximation; per check, Bonferroni over the
points of a curve).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import simkit
from simkit.cli import main
from simkit.diagnose import diagnose

REPO_ROOT = Path(simkit.__file__).resolve().parent.parent


# ----------------------------------------------------------------------------------------------
# hand computations (independent of simkit.diagnose)

def _unit(x):
    x = np.asarray(x, dtype=float)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _positive_lists(n, labels=None, positives=None):
    """M(x_i, .) as a list (with multiplicity) of row indices per anchor."""
    if labels is not None:
        return [[j for j in range(n) if labels[j] == labels[i]] for i in range(n)]
    return [list(map(int, row)) for row in positives]


def _hand_ce_c1_c2(phi, tau, plists):
    """CE, c1 and c2 by direct sums over rows (math.exp, python loops)."""
    n = len(phi)
    s = [[float(np.dot(phi[i], phi[j])) / tau for j in range(n)] for i in range(n)]
    ce = c1 = c2 = 0.0
    for i in range(n):
        z = sum(math.exp(v) for v in s[i]) / n
        z2 = sum(math.exp(2 * v) for v in s[i]) / n
        z3 = sum(math.exp(3 * v) for v in s[i]) / n
        pl = plists[i]
        m1 = sum(math.exp(s[i][j]) for j in pl) / len(pl)
        nu0 = sum(math.exp(2 * s[i][j]) for j in pl) / len(pl) / z**2
        es = sum(s[i][j] for j in pl) / len(pl)
        ce += (-es + math.log(z)) / n
        sig2 = z2 / z**2 - 1
        c1 += (m1 / z - sig2 / 2) / n
        kap3 = z3 / z**3 - 3 * z2 / z**2 + 2
        c2 += (-nu0 / 2 + kap3 / 3 + sig2 * m1 / z - 0.75 * sig2**2) / n
    return ce, c1, c2, s


def _hand_gap(s, plists, k):
    """gap_k = R_k - log k - CE by enumerating every (anchor, positive, k negatives) tuple."""
    n = len(s)
    risk = ce = 0.0
    for i in range(n):
        pl = plists[i]
        z = sum(math.exp(v) for v in s[i]) / n
        ce += (-sum(s[i][j] for j in pl) / len(pl) + math.log(z)) / n
        tot = 0.0
        for j in pl:
            for negs in itertools.product(range(n), repeat=k):
                tot += -s[i][j] + math.log(math.exp(s[i][j]) + sum(math.exp(s[i][m]) for m in negs))
        risk += tot / (len(pl) * n**k) / n
    return risk - math.log(k) - ce


SMALL_X = np.array([[1.0, 0.2, 0.0], [0.8, 0.5, 0.1], [-0.3, 1.0, 0.2], [0.1, 0.9, -0.4],
                    [0.0, -0.2, 1.0], [-0.6, -0.5, -0.6]])
SMALL_LABELS = np.array([0, 0, 1, 1, 1, 2])  # a singleton class included
SMALL_POS = np.array([[1, 2], [0, 0], [3, 4], [2, 2], [5, 3], [5, 4]])  # asymmetric, repeats, self-listing
TAU = 0.5


@pytest.fixture(scope="module")
def small_label_ds():
    return diagnose(SMALL_X, labels=SMALL_LABELS, tau=TAU, k=8, eps=0.01, n_tuples=1 << 14, rng=1)


@pytest.fixture(scope="module")
def small_index_ds():
    return diagnose(SMALL_X, positives=SMALL_POS, tau=TAU, k=8, eps=0.01, n_tuples=1 << 13, rng=2)


# ----------------------------------------------------------------------------------------------
# exact quantities against hand computation

@pytest.mark.parametrize("kernel", ["labels", "positives"])
@pytest.mark.deterministic(reason="exact enumeration (every row an anchor): MCSE exactly 0, rtol 1e-9")
def test_exact_gap_matches_brute_force_enumeration(kernel, small_label_ds, small_index_ds):
    """N = 6 discrete case: gap_exact at k = 1, 2, 4 equals the enumeration over all 6^k tuples."""
    ds = small_label_ds if kernel == "labels" else small_index_ds
    phi = _unit(SMALL_X)
    plists = _positive_lists(6, SMALL_LABELS if kernel == "labels" else None, SMALL_POS if kernel != "labels" else None)
    _, _, _, s = _hand_ce_c1_c2(phi, TAU, plists)
    for k in (1, 2, 4):
        expected = _hand_gap(s, plists, k)
        assert float(ds["gap_exact"].sel(k=k)) == pytest.approx(expected, rel=1e-9, abs=1e-12)
        assert float(ds["gap_exact_mcse"].sel(k=k)) == 0.0


@pytest.mark.parametrize("kernel", ["labels", "positives"])
@pytest.mark.deterministic(reason="exact sums (every row an anchor): MCSE exactly 0, rtol 1e-11")
def test_ce_c1_c2_exact_against_hand_sums(kernel, small_label_ds, small_index_ds):
    """Same-label (and index) kernel: CE, c1 and c2 by direct sums; MCSE exactly 0 (every row an anchor)."""
    ds = small_label_ds if kernel == "labels" else small_index_ds
    phi = _unit(SMALL_X)
    plists = _positive_lists(6, SMALL_LABELS if kernel == "labels" else None, SMALL_POS if kernel != "labels" else None)
    ce, c1, c2, _ = _hand_ce_c1_c2(phi, TAU, plists)
    assert float(ds["ce"]) == pytest.approx(ce, rel=1e-12, abs=1e-13)
    assert float(ds["c1"]) == pytest.approx(c1, rel=1e-12, abs=1e-13)
    assert float(ds["c2"]) == pytest.approx(c2, rel=1e-11, abs=1e-12)
    for name in ("ce_mcse", "c1_mcse", "c2_mcse"):
        assert float(ds[name]) == 0.0


def test_same_label_ce_and_c1_larger_case_by_hand():
    """8 rows in d = 4, three classes, tau = 0.3: CE and c1 of the same-label kernel by direct sums."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(8, 4))
    lab = np.array(["a", "a", "a", "b", "b", "c", "c", "c"])
    ds = diagnose(x, labels=lab, tau=0.3, n_tuples=1 << 12, rng=3)
    ce, c1, _, _ = _hand_ce_c1_c2(_unit(x), 0.3, _positive_lists(8, labels=lab))
    assert float(ds["ce"]) == pytest.approx(ce, rel=1e-12)
    assert float(ds["c1"]) == pytest.approx(c1, rel=1e-12)


@pytest.mark.parametrize("kernel", ["labels", "positives"])
def test_c2_is_the_limit_of_the_exact_curve(kernel):
    """c2 (derived in simkit.diagnose) against the exact curve's limit k (k gap_k - c1): Richardson
    extrapolation 2 f(2k) - f(k) of f(k) = k^2 (gap_k - c1/k) from simkit.exact.curve at k = 2^14, 2^15,
    with the atoms built here (not by diagnose)."""
    from simkit.exact.curve import expected_log_sum_parts
    phi = _unit(SMALL_X)
    plists = _positive_lists(6, SMALL_LABELS if kernel == "labels" else None, SMALL_POS if kernel != "labels" else None)
    ce, c1, c2, s = _hand_ce_c1_c2(phi, TAU, plists)
    s = np.array(s)
    pw = np.array([[pl.count(j) / len(pl) for j in range(6)] for pl in plists])
    ks = np.array([2**14, 2**15])
    _, centred = expected_log_sum_parts(s, pw, s, np.full(6, 1 / 6), ks)
    logz = np.log(np.exp(s).mean(axis=1))
    mu0 = (pw * np.exp(s)).sum(axis=1) / np.exp(logz)
    gap = (np.log1p(mu0[:, None] / ks[None, :]) + centred).mean(axis=0)
    f = ks**2 * (gap - c1 / ks)
    limit = 2 * f[1] - f[0]
    kw = {"labels": SMALL_LABELS} if kernel == "labels" else {"positives": SMALL_POS}
    ds = diagnose(SMALL_X, **kw, tau=TAU, n_tuples=1 << 10, rng=0)
    assert float(ds["c2"]) == pytest.approx(limit, rel=1e-5)
    assert float(ds["c2"]) == pytest.approx(c2, rel=1e-12)


def test_retrieval_agreement_by_hand(small_label_ds, small_index_ds):
    """top1 and recall10 (the anchor excluded from its own retrieval) against argmax by hand."""
    phi = _unit(SMALL_X)
    sim = phi @ phi.T
    np.fill_diagonal(sim, -np.inf)
    best = np.argmax(sim, axis=1)
    # labels: anchors with another row of their label (the singleton class 2 is left out)
    ok = [i for i in range(6) if np.sum(SMALL_LABELS == SMALL_LABELS[i]) > 1]
    assert float(small_label_ds["top1"]) == pytest.approx(np.mean([SMALL_LABELS[best[i]] == SMALL_LABELS[i] for i in ok]))
    assert float(small_label_ds["recall10"]) == 1.0  # N - 1 = 5 < 10: every other row is retrieved
    assert small_label_ds.attrs["n_anchors_no_other_positive"] == 1
    okp = [i for i in range(6) if any(j != i for j in SMALL_POS[i])]
    hits = [best[i] in [j for j in SMALL_POS[i] if j != i] for i in okp]
    assert float(small_index_ds["top1"]) == pytest.approx(np.mean(hits))
    assert small_index_ds.attrs["n_anchors_no_other_positive"] == 6 - len(okp)


# ----------------------------------------------------------------------------------------------
# Monte Carlo parts

T15_5 = 2.0 * float(stats.t.sf(5.0, 15))  # two-sided tail of one |z| <= 5 check on 15 df (register)
T15_4 = 2.0 * float(stats.t.sf(4.0, 15))  # the same for 4 SE
Z4 = 2.0 * float(stats.norm.sf(4.0))      # a normal 4-SE bound
# P(slope_p_half >= 0.05) for a true slope -1 with slope SE 0.11 (noncentrality 0.5 / 0.11 = 4.5 on 15 df)
MISS_HALF = float(stats.nct.cdf(stats.t.isf(0.025, 15), 15, 4.5) - stats.nct.cdf(-stats.t.isf(0.025, 15), 15, 4.5))


@pytest.mark.statistical
@pytest.mark.false_fail(2 * 11 * T15_5, reason="2 kernels x 11 grid points, each |z| <= 5 on t(15) (union bound)")
def test_monte_carlo_gap_agrees_with_exact(small_label_ds, small_index_ds):
    """The Monte Carlo gap (16 blocks of tuples) against the exact curve at all 11 grid points:
    |z| <= 5 with z on 15 df; false-failure rate <= 2 * 11 * P(t_15 > 5) ~ 3.5e-3 per kernel."""
    for ds in (small_label_ds, small_index_ds):
        z = (ds["gap"] - ds["gap_exact"]) / ds["gap_mcse"]
        assert np.all(np.isfinite(z)) and np.max(np.abs(z.values)) <= 5.0, z.values


@pytest.mark.false_fail(T15_4 + MISS_HALF, reason="|slope + 1| <= 4 SE on t(15) + the chance (1.3e-2, non-central t at 4.5) that 1/sqrt(k) is not rejected at 5%")
def test_prediction_slope_and_k_for_bias(small_label_ds):
    """bias_at_k = c1/k + c2/k^2; k_for_bias is the first k from which |prediction| <= eps for good;
    the slope of a clean 1/k curve is -1 with 1/sqrt(k) rejected (statistical: see the comment)."""
    ds = small_label_ds
    c1, c2, eps = float(ds["c1"]), float(ds["c2"]), 0.01
    assert float(ds["bias_at_k"]) == pytest.approx(c1 / 8 + c2 / 64, rel=1e-12)
    kb = int(ds["k_for_bias"])
    ks = np.arange(kb, 100 * kb)
    assert np.all(np.abs(c1 / ks + c2 / ks**2) <= eps)
    assert abs(c1 / (kb - 1) + c2 / (kb - 1) ** 2) > eps
    # |slope + 1| <= 4 jackknife SE (t on 15 df: false-failure rate ~1.2e-3)
    assert abs(float(ds["slope"]) + 1.0) <= 4 * float(ds["slope_se"])
    assert float(ds["slope_ci_low"]) < float(ds["slope"]) < float(ds["slope_ci_high"])
    # 1/sqrt(k) rejected at the 5% level: the slope's SE is ~0.11 with 2^14 tuples (t ~ 4.5 on 15 df),
    # so the chance of a false failure (a type II error) is below 1%
    assert float(ds["slope_p_half"]) < 0.05
    np.testing.assert_allclose(ds["gap_predicted"], c1 / ds["k"] + c2 / ds["k"] ** 2, rtol=1e-12)


@pytest.mark.statistical
@pytest.mark.false_fail(T15_4 + T15_5, reason="4-SE slope bound and 5-MCSE gap bound, each two-sided on t(15)")
def test_negative_gap_and_gap_at_k():
    """Positives anti-aligned with their anchor (the least similar row; 40 rows in d = 3): c1 < 0 and
    the gap is negative, so the slope is that of log(-gap), -1 within 4 jackknife SE (t on 15 df:
    false-failure rate ~1.2e-3). The user's k = 100 joins the grid: gap_at_k is the Monte Carlo gap
    there, within 5 MCSE of the exact gap (~2e-4); a k beyond the grid gives NaN."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3))
    u = _unit(x)
    pos = np.argmin(u @ u.T, axis=1)[:, None]
    ds = diagnose(x, positives=pos, tau=0.25, k=100, n_tuples=1 << 13, rng=6)
    assert float(ds["c1"]) < 0 and np.all(ds["gap_exact"].values < 0)
    assert ds.attrs["slope_note"].startswith("fitted to log(-gap)")
    assert abs(float(ds["slope"]) + 1.0) <= 4 * float(ds["slope_se"])
    assert 100 in ds["k"].values
    assert float(ds["gap_at_k"]) == float(ds["gap"].sel(k=100))
    assert abs(float(ds["gap_at_k"]) - float(ds["gap_exact"].sel(k=100))) <= 5 * float(ds["gap_at_k_mcse"])
    far = diagnose(x, positives=pos, tau=0.25, k=5000, n_tuples=1 << 8, rng=6)
    assert np.isnan(float(far["gap_at_k"])) and 5000 not in far["k"].values
    assert float(far["bias_at_k"]) == pytest.approx(float(far["c1"]) / 5000 + float(far["c2"]) / 5000**2, rel=1e-12)


@pytest.mark.statistical
@pytest.mark.false_fail(3 * Z4, reason="3 two-sided normal 4-SE bounds")
def test_anchor_subsample_against_full_hand_computation():
    """N = 2000 rows, d = 16, 20 classes, 256 anchors: CE, c1, top1 against their values over all
    rows (numpy N x N here). |z| <= 4 each: false-failure rate ~ 3 * 6.3e-5 = 2e-4."""
    rng = np.random.default_rng(11)
    n, d, tau = 2000, 16, 0.25
    lab = rng.integers(0, 20, size=n)
    means = _unit(rng.normal(size=(20, d)))
    x = means[lab] + rng.normal(scale=0.25, size=(n, d))
    ds = diagnose(x, labels=lab, tau=tau, n_anchors=256, n_tuples=1 << 12, n_exact_anchors=8, rng=5)
    phi = _unit(x)
    s = phi @ phi.T / tau
    logz = np.log(np.mean(np.exp(s), axis=1))
    same = lab[:, None] == lab[None, :]
    ce = np.mean(logz - (s * same).sum(axis=1) / same.sum(axis=1))
    z, z2 = np.exp(logz), np.mean(np.exp(2 * s), axis=1)
    c1 = np.mean((np.exp(s) * same).sum(axis=1) / same.sum(axis=1) / z - (z2 / z**2 - 1) / 2)
    np.fill_diagonal(s, -np.inf)
    top1 = np.mean(lab[np.argmax(s, axis=1)] == lab)
    for name, truth in (("ce", ce), ("c1", c1), ("top1", top1)):
        se = float(ds[f"{name}_mcse"])
        assert se > 0
        assert abs(float(ds[name]) - truth) <= 4 * se, (name, float(ds[name]), truth, se)
    assert ds.attrs["n_anchors"] == 256


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.false_fail(2 * 11 * T15_5, reason="2 curves x 11 grid points, each |z| <= 5 on t(15); slow, outside the default suite")
def test_subsampled_gap_curves_against_full_exact_curve():
    """N = 400 rows, 128 anchors, exact curve on 16 of them: the two-phase gap_exact and the Monte
    Carlo gap (anchor blocks) against the exact curve averaged over all 400 rows (built here with
    simkit.exact.curve). |z| <= 5 at 11 grid points, SEs from 15-16 df: false-failure rate
    <= 2 * 11 * 2 * P(t_15 > 5) ~ 7e-3."""
    from simkit.exact.curve import expected_log_sum_parts
    rng = np.random.default_rng(21)
    n, d, tau = 400, 8, 0.4
    lab = rng.integers(0, 8, size=n)
    x = _unit(rng.normal(size=(8, d)))[lab] + rng.normal(scale=0.4, size=(n, d))
    ds = diagnose(x, labels=lab, tau=tau, n_anchors=128, n_exact_anchors=16, n_tuples=1 << 14, rng=8)
    phi = _unit(x)
    s = phi @ phi.T / tau
    same = (lab[:, None] == lab[None, :]).astype(float)
    pw = same / same.sum(axis=1, keepdims=True)
    ks = ds["k"].values
    _, centred = expected_log_sum_parts(s, pw, s, np.full(n, 1.0 / n), ks)
    mu0 = (pw * np.exp(s)).sum(axis=1) / np.exp(s).mean(axis=1)
    truth = (np.log1p(mu0[:, None] / ks[None, :]) + centred).mean(axis=0)
    for name in ("gap_exact", "gap"):
        z = (ds[name].values - truth) / ds[f"{name}_mcse"].values
        assert np.all(np.isfinite(z)) and np.max(np.abs(z)) <= 5.0, (name, z)


@pytest.mark.statistical
@pytest.mark.false_fail(4 * Z4, reason="4 two-sided normal 4-SE bounds")
def test_augmentation_views_against_brute_force_monte_carlo():
    """positive_embeddings: views v = normalise(x_i + 0.3 xi), xi standard normal, N = 12 rows in
    d = 3, tau = 0.5, m = 64 views per row. Truth by brute force with fresh views: CE and c1 from
    40,000 views per row, gap_k at k = 4 and 32 as the plain InfoNCE average over 400,000 tuples
    (anchor, fresh view, k negatives) minus log k minus CE. Each |z| <= 4 with the combined
    standard error: false-failure rate ~ 4 * 6.3e-5 = 2.5e-4. Smallest discrepancy detectable
    (4 combined SE, printed on failure; measured 2026-12-01): 0.028 nats in CE (mostly the 64-view
    MCSE of diagnose), 0.074 in c1 (3% of c1 = 2.44), 4% of gap_4 and 9% of gap_32."""
    rng = np.random.default_rng(20261201)
    n, d, m, tau, sd = 12, 3, 64, 0.5, 0.3
    x = _unit(rng.normal(size=(n, d)))

    def views(count, gen):
        return _unit(x[:, None, :] + sd * gen.normal(size=(n, count, d)))

    ds = diagnose(x, positive_embeddings=views(m, rng), tau=tau, k_grid=[1, 2, 4, 8, 16, 32], n_tuples=1 << 14, rng=9)
    # brute force: CE and c1 with 40,000 fresh views per row
    bf = np.random.default_rng(99)
    big = views(40_000, bf)
    s_rows = x @ x.T / tau
    z = np.exp(s_rows).mean(axis=1)
    z2 = np.exp(2 * s_rows).mean(axis=1)
    s_pos = np.einsum("nd,nmd->nm", x, big) / tau
    ce_i = -s_pos.mean(axis=1) + np.log(z)
    ce_t, ce_se = ce_i.mean(), np.sqrt(np.sum(s_pos.var(axis=1, ddof=1) / s_pos.shape[1])) / n
    w0 = np.exp(s_pos) / z[:, None]
    c1_t = np.mean(w0.mean(axis=1) - (z2 / z**2 - 1) / 2)
    c1_se = np.sqrt(np.sum(w0.var(axis=1, ddof=1) / w0.shape[1])) / n
    for name, truth, tse in (("ce", ce_t, ce_se), ("c1", c1_t, c1_se)):
        comb = math.hypot(float(ds[f"{name}_mcse"]), tse)
        assert abs(float(ds[name]) - truth) <= 4 * comb, (name, float(ds[name]), truth, 4 * comb)
    # brute force InfoNCE: plain average of l_k over tuples with fresh views
    n_t = 400_000
    for k in (4, 32):
        a = bf.integers(0, n, size=n_t)
        v = _unit(x[a] + sd * bf.normal(size=(n_t, d)))
        sp = np.sum(x[a] * v, axis=1) / tau
        sn = s_rows[a[:, None], bf.integers(0, n, size=(n_t, k))]
        loss = -sp + np.logaddexp(sp, np.log(np.exp(sn).sum(axis=1)))
        gap_t = loss.mean() - math.log(k) - ce_t
        gap_se = math.hypot(loss.std(ddof=1) / math.sqrt(n_t), ce_se)
        comb = math.hypot(float(ds["gap_mcse"].sel(k=k)), gap_se)
        assert abs(float(ds["gap"].sel(k=k)) - gap_t) <= 4 * comb, (k, float(ds["gap"].sel(k=k)), gap_t, 4 * comb)


@pytest.mark.deterministic(reason="exact identities of the one-view MCSE (rtol 1e-10) and positivity, for any draw")
def test_one_view_per_row_has_a_finite_conservative_mcse():
    """m = 1 view: the views' error cannot be split from the anchors' spread; the MCSE is then
    s/sqrt(n) over the anchors (an upper bound), finite and positive, never NaN."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(20, 3))
    v = x[:, None, :] + 0.3 * rng.normal(size=(20, 1, 3))
    ds = diagnose(x, positive_embeddings=v, tau=0.5, n_tuples=1 << 10, rng=1)
    phi, vv = _unit(x), _unit(v)[:, 0]
    s = phi @ phi.T / 0.5
    ce_i = np.log(np.exp(s).mean(axis=1)) - np.sum(phi * vv, axis=1) / 0.5
    assert float(ds["ce"]) == pytest.approx(ce_i.mean(), rel=1e-12)
    assert float(ds["ce_mcse"]) == pytest.approx(ce_i.std(ddof=1) / np.sqrt(20), rel=1e-10)
    for name in ("c1_mcse", "c2_mcse", "gap_mcse", "gap_exact_mcse"):
        assert np.all(np.isfinite(ds[name].values)) and np.all(ds[name].values > 0), name


# ----------------------------------------------------------------------------------------------
# dataset conventions, array-likes

def test_cf_attributes(small_label_ds):
    ds = small_label_ds
    for key in ("Conventions", "title", "history", "source", "references"):
        assert ds.attrs.get(key), key
    assert ds.attrs["Conventions"] == "CF-1.11"
    for name in [*ds.data_vars, *ds.coords]:
        a = ds[name].attrs
        for key in ("long_name", "units", "description"):
            assert a.get(key), (name, key)
        assert a["units"] != "nat" and "nat" != a["units"].strip().lower()
    assert "nats" in ds["ce"].attrs["long_name"] and ds["ce"].attrs["units"] == "1"


class _ArrayLike:
    """Not a NumPy array: only ``__array__`` (what a torch tensor offers)."""

    def __init__(self, a):
        self._a = np.asarray(a)

    def __array__(self, dtype=None, copy=None):
        return self._a if dtype is None else self._a.astype(dtype)


def test_array_like_input_without_torch():
    x32 = SMALL_X.astype(np.float32)
    a = diagnose(_ArrayLike(x32), labels=_ArrayLike(SMALL_LABELS), tau=TAU, n_tuples=1 << 10, rng=4)
    b = diagnose(x32, labels=SMALL_LABELS, tau=TAU, n_tuples=1 << 10, rng=4)
    for name in a.data_vars:
        np.testing.assert_array_equal(a[name].values, b[name].values)
    c = diagnose(SMALL_X, positives=_ArrayLike(SMALL_POS), tau=TAU, n_tuples=1 << 10, rng=4)
    assert np.isfinite(float(c["ce"]))


def test_torch_is_not_imported():
    """In-process: diagnose on an ``__array__`` object imports no torch (checked when torch was not
    loaded before; the subprocess variant below is always decisive)."""
    had = "torch" in sys.modules
    diagnose(_ArrayLike(SMALL_X), labels=SMALL_LABELS, tau=TAU, n_tuples=64)
    if not had:
        assert "torch" not in sys.modules


@pytest.mark.slow
def test_torch_is_not_imported_fresh_process():
    code = ("import sys, numpy as np, simkit\n"
            "class A:\n"
            "    def __init__(self, a): self.a = a\n"
            "    def __array__(self, dtype=None, copy=None): return self.a\n"
            "x = np.random.default_rng(0).normal(size=(5, 3))\n"
            "ds = simkit.diagnose(A(x), labels=A(np.array([0, 0, 1, 1, 1])), tau=1.0, n_tuples=64)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr


# ----------------------------------------------------------------------------------------------
# bad input

def _x():
    return np.random.default_rng(0).normal(size=(6, 3))


API_BAD = [
    (dict(embeddings=np.array([[1.0, np.nan], [0.0, 1.0]]), labels=[0, 1]), "'embeddings' must be finite"),
    (dict(embeddings=np.array([[1.0, np.inf], [0.0, 1.0]]), labels=[0, 1]), "'embeddings' must be finite"),
    (dict(embeddings=np.ones(6), labels=[0] * 6), "'embeddings' must be a 2-D array"),
    (dict(embeddings=np.ones((6, 3), dtype=complex), labels=[0] * 6), "'embeddings' must be an array of real numbers"),
    (dict(embeddings=np.array([["a", "b"], ["c", "d"]]), labels=[0, 1]), "'embeddings' must be an array of real"),
    (dict(embeddings=np.vstack([np.zeros(3), np.ones((5, 3))]), labels=[0] * 6), "'embeddings' must have no zero rows"),
    (dict(labels=[0] * 5), "'labels' must have shape (6,)"),
    (dict(labels=np.array([0.5] * 6)), "'labels' must be integers or strings"),
    (dict(positives=np.array([[0], [1], [2], [3], [4], [6]])), "'positives' must hold row indices in [0, 5], got 6"),
    (dict(positives=np.array([[0], [1], [2], [3], [4], [-1]])), "'positives' must hold row indices in [0, 5], got -1"),
    (dict(positives=np.zeros((6, 1))), "'positives' must be an integer array"),
    (dict(positives=np.zeros((5, 1), dtype=int)), "'positives' must have shape (6, m)"),
    (dict(positive_embeddings=np.ones((6, 2, 4))), "'positive_embeddings' must have shape (6, m, 3)"),
    (dict(positive_embeddings=np.full((6, 2, 3), np.nan)), "'positive_embeddings' must be finite"),
    (dict(labels=[0] * 6, positives=np.zeros((6, 1), dtype=int)), "exactly one of 'labels', 'positives'"),
    (dict(), "exactly one of 'labels', 'positives', 'positive_embeddings' must be given, got none"),
    (dict(labels=[0] * 6, tau=-1.0), "'tau' must be > 0, got -1.0"),
    (dict(labels=[0] * 6, tau=0.0), "'tau' must be > 0, got 0.0"),
    (dict(labels=[0] * 6, eps=0.0), "'eps' must be > 0, got 0.0"),
    (dict(labels=[0] * 6, k=0), "'k' must be >= 1, got 0"),
    (dict(labels=[0] * 6, k=2.5), "'k' must be an integer"),
    (dict(labels=[0] * 6, k_grid=[1, 2, 2, 4]), "'k_grid' must be at least 4 increasing integers"),
]


@pytest.mark.parametrize("kwargs, message", API_BAD)
def test_api_bad_input(kwargs, message):
    kw = {"embeddings": _x(), "tau": 0.5, **kwargs}
    x = kw.pop("embeddings")
    with pytest.raises(ValueError) as exc:
        diagnose(x, **kw)
    text = str(exc.value)
    assert message in text and "\n" not in text, text


def _run_cli(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exc:  # argparse errors
            status = exc.code
    return status, out.getvalue(), err.getvalue()


CLI_BAD = [  # (npz arrays or None for a missing file, extra argv, text naming the argument)
    (dict(embeddings=np.array([[np.nan, 1.0]] * 6), labels=np.zeros(6, int)), [], "'embeddings' must be finite"),
    (dict(embeddings=np.ones((6, 3, 1)), labels=np.zeros(6, int)), [], "'embeddings' must be a 2-D array"),
    (dict(embeddings=np.ones((6, 3), dtype=complex), labels=np.zeros(6, int)), [], "'embeddings' must be an array of real"),
    (dict(embeddings="X", labels=np.zeros(6, int)), [], "'embeddings'"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(5, int)), [], "'labels' must have shape (6,)"),
    (dict(embeddings=np.ones((6, 3)), positives=np.full((6, 2), 6)), [], "'positives' must hold row indices"),
    (dict(embeddings=np.ones((6, 3)), positives=np.full((6, 2), -3)), [], "'positives' must hold row indices"),
    (dict(embeddings=np.ones((6, 3)), positives=np.zeros((6, 2))), [], "'positives' must be an integer array"),
    (dict(embeddings=np.ones((6, 3)), positive_embeddings=np.ones((6, 2, 2))), [], "'positive_embeddings' must have shape"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int), positives=np.zeros((6, 1), int)), [], "exactly one of"),
    (dict(embeddings=np.ones((6, 3))), [], "exactly one of"),
    (dict(labels=np.zeros(6, int)), [], "'embeddings'"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int), label=np.zeros(6)), [], "unknown array 'label'"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--tau", "-1"], "'--tau' must be > 0, got -1.0"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--tau", "0"], "'--tau' must be > 0"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--tau", "nan"], "'--tau' must be finite"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--tau", "abc"], "'--tau' must be a number"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--eps", "0"], "'--eps' must be > 0"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--k", "0"], "'--k' must be >= 1"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--k", "2.5"], "'--k' must be an integer"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--n-tuples", "0"], "'--n-tuples' must be >= 1"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--n-anchors", "x"], "'--n-anchors' must be an integer"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--seed", "-1"], "'--seed' must be >= 0"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), [None], "'--tau' is required"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--out", "o.txt"], "'--out' must end in .nc"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--report", "r.png"], "'--report' must end in .pdf"),
    (dict(embeddings=np.ones((6, 3)), labels=np.zeros(6, int)), ["--out", "nodir/o.nc"], "'--out' must be in an existing"),
    (None, [], "'FILE' does not exist"),
    ("garbage", [], "'FILE' is not a readable npz"),
]


@pytest.mark.parametrize("arrays, extra, message", CLI_BAD)
def test_cli_bad_input(tmp_path, arrays, extra, message):
    """Each case: exit 2, exactly one line on stderr naming the argument, no file written."""
    f = tmp_path / "in.npz"
    if isinstance(arrays, dict):
        np.savez(f, **arrays)
    elif arrays == "garbage":
        f.write_bytes(b"not a zip file")
    before = sorted(os.listdir(tmp_path))
    tau = [] if extra == [None] else ["--tau", "0.5"]
    extra = [] if extra == [None] else extra
    args = ["diagnose", str(f), *tau, "--out", str(tmp_path / "o.nc"), "--report", str(tmp_path / "r.pdf")]
    args += [a if not (a.endswith((".nc", ".txt", ".png", ".pdf"))) else str(tmp_path / a) for a in extra]
    status, out, err = _run_cli(args)
    assert status == 2, (status, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simkit: error: ") and "Traceback" not in err, err
    assert message in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path)) == before


def test_cli_writes_dataset_and_report(tmp_path):
    """A good run: exit 0, summary printed, netCDF (readable, same CE as the API) and a PDF written;
    tau may come from the npz."""
    import xarray as xr
    rng = np.random.default_rng(3)
    lab = rng.integers(0, 4, size=60)
    x = np.eye(5)[lab][:, :5] * 2 + rng.normal(size=(60, 5))
    f = tmp_path / "in.npz"
    np.savez(f, embeddings=x, labels=lab, tau=0.5)
    status, out, err = _run_cli(["diagnose", str(f), "--k", "16", "--n-tuples", "2048", "--out", str(tmp_path / "o.nc"),
                                 "--report", str(tmp_path / "r.pdf")])
    assert status == 0, err
    assert "negatives needed" in out
    ce, c1, _, _ = _hand_ce_c1_c2(_unit(x), 0.5, _positive_lists(60, labels=lab))
    with xr.open_dataset(tmp_path / "o.nc", engine="h5netcdf") as ds:
        assert float(ds["ce"]) == pytest.approx(ce, rel=1e-12)
        assert float(ds["c1"]) == pytest.approx(c1, rel=1e-12)
        assert ds.attrs["Conventions"] == "CF-1.11" and ds.attrs["k"] == 16
    assert (tmp_path / "r.pdf").read_bytes()[:5] == b"%PDF-"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz", "o.nc", "r.pdf"]
