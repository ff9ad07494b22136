"""Sizes at alpha = 1e-3 of candidate C2 curve tests on resampled search_ce blocks (protocols/search_ce_curve.md).

The pool (search_ce_curve_pool.py) holds groups of blocks, one pilot per group, as one seed of the study. Null
world: each group recentred on d_exact (its own mean subtracted), so the null holds exactly with the real blocks'
shape. A replicate picks a group at random and draws n blocks from it with replacement, then applies:

* ``max-t``: simkit.stats.truth_tests.max_t_test, Efron bootstrap (N_BOOT resamples; the rule of
  protocols/search_ce.md), on the first N_MAXT replicates only (its p-values resolve to 1 / (N_BOOT + 1));
* ``bonferroni-t <cols>``: every tested column's two-sided Student t on n - 1 df, p = min(1, p_columns *
  min_j p_j) (simkit.stats.truth_tests.bonferroni_t_test, vectorised here over replicates), over: every k;
  k >= 8; k >= 16; the four pre-chosen k = 16, 256, 4096, 16384.

Power: the same replicates with one column (k = 256) shifted by SHIFT standard errors of the n-block mean
(the group's sd / sqrt(n)). Also per column: skewness and excess kurtosis of the blocks, and the z-score of
the whole pool's mean against d_exact (whether the exact curve and the estimator agree, independent of any test).

    python docs/diagnostics/search_ce_curve_sizes.py SETTING POOL_DIR N_BLOCKS N_REPLICATES N_MAXT N_BOOT SHIFT

Results: search_ce_curve_sizes_SETTING_nN_BLOCKS.json (one JSON line; every rate as [rejections, rate, 95%
Clopper-Pearson low, high]), run with N_MAXT = 1000 (n = 32) or 200 (n = 16, 64), N_BOOT = 999 (max-t p-values
then resolve to 1e-3 only: its rates below 1e-2 are not informative) and SHIFT = 7.
"""

from __future__ import annotations

import glob
import json
import sys
import time

import numpy as np
from scipy import stats

from simkit import VMFKernel
from simkit.distributions.designs import SEARCH_SETTINGS, build_pi
from simkit.estimators.infonce import k_grid
from simkit.exact.search_curve import search_d_curve
from simkit.stats.truth_tests import max_t_test


def bonferroni_t(b: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Bonferroni-t p-values of replicates b (R, n, p) against mu (p,)."""
    n = b.shape[1]
    t = np.abs(b.mean(1) - mu) / (b.std(1, ddof=1) / np.sqrt(n))
    return np.minimum(1.0, b.shape[2] * np.min(2 * stats.t.sf(t, n - 1), axis=1))


def main(setting, pool_dir, n, n_rep, n_maxt, n_boot, shift):
    t0 = time.time()
    family, dim, kp, km, tau = SEARCH_SETTINGS[setting]
    k = k_grid(16384)
    exact = search_d_curve(build_pi({"pi": family, "dim": dim, "kappa_pi": kp}), VMFKernel(km), tau, k).d
    groups = [np.load(f) for f in sorted(glob.glob(f"{pool_dir}/{setting}_g*.npy"))]
    allb = np.concatenate(groups)
    z_pool = (allb.mean(0) - exact) / (allb.std(0, ddof=1) / np.sqrt(allb.shape[0]))
    centred = [g - g.mean(0) + exact for g in groups]
    j256 = int(np.flatnonzero(k == 256)[0])
    cols = {"every k": np.arange(k.size), "k >= 8": np.flatnonzero(k >= 8), "k >= 16": np.flatnonzero(k >= 16),
            "k = 16, 256, 4096, 16384": np.flatnonzero(np.isin(k, (16, 256, 4096, 16384)))}
    rng, boot = np.random.default_rng(4242), np.random.default_rng(4343)
    res = {name: [] for c in ("max-t", *(f"bonferroni-t {c}" for c in cols)) for name in (c, c + " shifted")}
    chunk = 2000
    for start in range(0, n_rep, chunk):
        m = min(chunk, n_rep - start)
        gi = rng.integers(len(centred), size=m)
        b = np.stack([centred[g][rng.integers(0, centred[g].shape[0], size=n)] for g in gi])
        sd = np.array([centred[g][:, j256].std(ddof=1) for g in gi])
        bs = b.copy()
        bs[:, :, j256] += (shift * sd / np.sqrt(n))[:, None]
        for suffix, bb in (("", b), (" shifted", bs)):
            for c, idx in cols.items():
                res[f"bonferroni-t {c}{suffix}"].extend(bonferroni_t(bb[:, :, idx], exact[idx]))
            for r in range(max(0, min(m, n_maxt - start))):
                res["max-t" + suffix].append(max_t_test(bb[r], exact, rng=boot, n_boot=n_boot).p_value)
    out = {"setting": setting, "n_pool": int(allb.shape[0]), "n_groups": len(groups), "n_blocks": n,
           "n_boot": n_boot, "shift_se_at_k256": shift,
           "pool_z_vs_exact": [round(float(v), 2) for v in z_pool],
           "skewness": [round(float(v), 2) for v in stats.skew(np.concatenate(centred), axis=0)],
           "excess_kurtosis": [round(float(v), 1) for v in stats.kurtosis(np.concatenate(centred), axis=0)]}
    for name, p in res.items():
        p = np.asarray(p)
        out[name] = {"n": int(p.size)}
        for a in (2.5e-4, 5e-4, 1e-3, 2e-3, 1e-2, 5e-2):
            x = int(np.sum(p < a))
            lo, hi = stats.binomtest(x, p.size).proportion_ci(0.95, method="exact") if p.size else (np.nan, np.nan)
            out[name][f"alpha_{a:g}"] = [x, round(x / max(p.size, 1), 5), round(float(lo), 5), round(float(hi), 5)]
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5]), float(a[6]))
