"""The sweep rules of simkit.stats.generalisation on deterministic curves (no randomness): a curve that
honours a rule passes it and one that breaks it fails (positive controls), with the reason the rule states.

The blocks are c_b x level^b times a fixed +-2% wobble with no trend, so the slopes are known to about 0.01.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simkit.stats.generalisation import ni_detail, ni_summary, rate_sweep, sweep_detail, trend_sweep

WOBBLE = 1.0 + 0.02 * np.sin(np.arange(10)[:, None] * 1.7 + np.arange(6)[None, :] * 2.3)
LEVELS = 2.0 ** np.arange(4, 10)  # 16 .. 512


def test_rate_sweep_n():
    """G ~ n^-1 decays faster than n^-1/2: H0 slope <= -1/2 is not rejected (pass); G flat in n rejects (fail)."""
    fast = 3.0 * LEVELS ** -1.0 * WOBBLE
    vals, reasons, verdict = rate_sweep("n", LEVELS, fast, fast, alpha=0.01, power=0.9)
    assert verdict == "pass" and reasons == [] and vals["slope"] == pytest.approx(-1.0, abs=0.02)
    assert vals["fit"].shape == LEVELS.shape and np.isfinite(vals["sd_slope"])
    flat = 0.5 * WOBBLE
    vals, reasons, verdict = rate_sweep("n", LEVELS, flat, flat, alpha=0.01, power=0.9)
    assert verdict == "fail" and "is above -1/2" in reasons[0]
    vals, reasons, verdict = rate_sweep("n", LEVELS, -flat, -flat, alpha=0.01, power=0.9)
    assert verdict == "fail" and reasons == ["mean G not positive at every level: no log-log fit"]


def test_rate_sweep_tau():
    """Growth as tau falls (G ~ 1/tau) is shown; a flat G is not (the rule must reject to pass)."""
    taus = 1.0 / LEVELS
    vals, reasons, verdict = rate_sweep("tau", taus, LEVELS[None, :] * WOBBLE, WOBBLE, alpha=0.01, power=0.9)
    assert verdict == "pass" and vals["slope"] == pytest.approx(-1.0, abs=0.02) and "false_fail" in vals
    _, reasons, verdict = rate_sweep("tau", taus, WOBBLE, WOBBLE, alpha=0.01, power=0.9)
    assert verdict == "fail" and "growth of G as tau falls not shown" in reasons[0]


def test_trend_sweep_k_and_d():
    """Flat E[G] in k passes the one-sided no-growth test; +0.05 nat per doubling fails it. The d sweep is
    two-sided and reports the equivalence test (flat: equivalent within 10%)."""
    flat = 0.4 * WOBBLE
    vals, reasons, verdict = trend_sweep("k", LEVELS, flat, 64, alpha=0.01, power=0.9, equiv_margin=0.1)
    assert verdict == "pass" and abs(vals["trend"]) < 0.005 and vals["trend_level"] == pytest.approx(0.4, rel=0.02)
    grow = flat + 0.05 * np.log2(LEVELS)[None, :]
    _, reasons, verdict = trend_sweep("k", LEVELS, grow, 64, alpha=0.01, power=0.9, equiv_margin=0.1)
    assert verdict == "fail" and "nat per doubling of k" in reasons[0]
    vals, _, verdict = trend_sweep("d", LEVELS, flat, 64, alpha=0.01, power=0.9, equiv_margin=0.1)
    assert verdict == "pass" and vals["equiv_verdict"] == "pass" and vals["equiv_margin"] == pytest.approx(0.04, rel=0.02)


def test_ni_summary_and_details():
    """Flat E[G] in k: non-inferiority to +10% per doubling shown; E[G] ~ sqrt(k) grows 41%: not shown."""
    res, fields = ni_summary(LEVELS, 0.3 * WOBBLE, delta=0.1, alpha=0.01)
    assert res.reject and fields["ni_reject"] == 1.0 and abs(float(fields["growth"])) < 0.01
    assert fields["level"] == pytest.approx(0.3, rel=0.02) and fields["ni_blocks"] == 10.0
    res, fields = ni_summary(LEVELS, 0.3 * np.sqrt(LEVELS)[None, :] * WOBBLE, delta=0.1, alpha=0.01)
    assert not res.reject and float(fields["growth"]) == pytest.approx(math.sqrt(2) - 1, abs=0.01)
    v = {n: float(x) for n, x in fields.items()}.get
    text = ni_detail("kprim", v, LEVELS, delta=0.1)
    assert text.startswith("kprim (k = 16..512): b = 0.4997 ± 0.0010 (growth +41.4%") and "on 9 df" in text
    assert text.endswith("against growth >= 10%")
    d = {"slope": -0.75, "slope_se": 0.05, "slope_p": 0.9, "slope_detect": 0.1, "sd_slope": -0.5, "sd_slope_se": 0.1}
    assert sweep_detail("n", d.get, power=0.9, equiv_margin=0.1) == (
        "n-slope -0.750 ± 0.050 (p of H0 <= -1/2: 0.9; a slope 0.100 above -1/2 is detected with probability 0.9); "
        "sd(G) slope -0.500 ± 0.100")
