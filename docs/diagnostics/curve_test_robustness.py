"""Why does the 14-column Hotelling curve test over-reject for asymmetry's brown-vmf-d3 (quick design)?

Calibration (data/calibration/asymmetry.nc, 200 seeds): brown-vmf-d3's curve test rejects on 4/200 seeds
at alpha = 1e-3 (P(X >= 4 | 200, 1e-3) ~ 5e-5), and its p-values and rot-uniform-d3's are non-uniform
(KS 0.004). Two explanations predict different things:

(a) the exact curve (quadrature) is slightly off: then a pool of many blocks, tested at once, rejects
    (n large, so the T^2 reference is accurate whatever the blocks' law);
(b) the block means are too far from Gaussian for Hotelling's F reference with p = 14 columns and
    n = 48 blocks: then the pool does not reject, but 48-block subsets resampled from the pool *after
    recentring it on the exact curve* (so the null holds exactly in the resampling world, with the real
    blocks' shape) reject more often than alpha.

This script draws a pool of quick-design blocks of one setting with the study's own estimator (the
same calls as studies/asymmetry.py: pilot coefficients, GapEstimator.block at block_anchors), runs
(a), and for (b) estimates the size at alpha = 1e-3 (and 1e-2) of the test as used (14 columns) and of
merged variants (max_columns = 7, 4, 2: contiguous k groups averaged, curve_test's own merging) and of
k >= 16 only. Exploratory diagnostic: it changes no verdict; a fix is a new analysis version.

    python docs/diagnostics/curve_test_robustness.py [SETTING] [N_POOL] [N_RESAMPLE]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from scipy import stats

from simkit.distributions.designs import ASYMMETRY_SETTINGS, build_kernel, build_pi
from simkit.exact.curve import gap_curve
from simkit.estimators.infonce import GapEstimator
from simkit.runner import get_study, resolve_config
from simkit.stats.truth_tests import curve_test


def pool(setting: str, n_pool: int, seed: int = 20261202):
    st = get_study("asymmetry")
    cfg = resolve_config(st, None, quick=True, seed=1)
    cell = st._cell(setting, cfg)
    pi, kernel = build_pi(cell), build_kernel(cell)
    gest = GapEstimator(pi, kernel, cell["tau"], cfg["k_max"])
    root = np.random.default_rng(seed)
    r_pilot, r_const, r_blocks = root.spawn(3)
    coef = gest.calibrate(cfg["block_anchors"], r_pilot, n_blocks=cfg["pilot_blocks"])
    curve = gap_curve(pi, kernel, cell["tau"], gest.grid, rng=r_const, n_cv=cfg["n_mc"])
    blocks = np.stack([gest.block(cfg["block_anchors"], r, coef)["gap_cv"] for r in r_blocks.spawn(n_pool)])
    cov = curve.gap_cov if curve.gap_cov is not None else None
    return gest.grid, blocks, np.asarray(curve.gap), cov, cfg


def hotelling_p(b: np.ndarray, mu: np.ndarray) -> np.ndarray:
    """Batched one-sample Hotelling F p-values: b (m, n, p), mu (p,)."""
    m, n, p = b.shape
    xbar = b.mean(axis=1)
    c = b - xbar[:, None, :]
    s = np.einsum("mni,mnj->mij", c, c) / (n - 1)
    d = xbar - mu
    t2 = n * np.einsum("mi,mi->m", d, np.linalg.solve(s, d[..., None])[..., 0])
    return stats.f.sf((n - p) / (p * (n - 1)) * t2, p, n - p)


def merge_matrix(p: int, groups: int) -> np.ndarray:
    m = np.zeros((groups, p))
    for g, idx in enumerate(np.array_split(np.arange(p), groups)):
        m[g, idx] = 1.0 / idx.size
    return m


def main(setting="brown-vmf-d3", n_pool=2000, n_resample=100000):
    t0 = time.time()
    k, blocks, exact, cov, cfg = pool(setting, n_pool)
    t_pool = time.time() - t0
    n = int(cfg["n_blocks"])
    out = {"setting": setting, "n_pool": n_pool, "n_blocks": n, "block_anchors": int(cfg["block_anchors"]),
           "k": k.tolist(), "pool_seconds": round(t_pool, 1), "exact_cov_zero": cov is None or not np.any(cov)}
    # (a) the exact curve against the whole pool (n = n_pool: the F reference is accurate)
    full = curve_test(blocks, exact, exact_cov=None if out["exact_cov_zero"] else cov)
    z = (blocks.mean(0) - exact) / (blocks.std(0, ddof=1) / np.sqrt(n_pool))
    out["pool_test"] = {"p": full.p_value, "reference": full.distribution, "z_by_k": np.round(z, 2).tolist()}
    # shape of the blocks by k
    out["skewness_by_k"] = np.round(stats.skew(blocks, axis=0), 3).tolist()
    out["excess_kurtosis_by_k"] = np.round(stats.kurtosis(blocks, axis=0), 3).tolist()
    # (b) size of variants on 48-block resamples of the pool recentred on the exact curve
    centred = blocks - blocks.mean(0) + exact
    rng = np.random.default_rng(7)
    variants = {"14 columns (as used)": np.eye(k.size), "merged to 7": merge_matrix(k.size, 7),
                "merged to 4": merge_matrix(k.size, 4), "merged to 2": merge_matrix(k.size, 2),
                "k >= 16 only": np.eye(k.size)[k >= 16]}
    pv = {name: [] for name in variants}
    batch = 5000
    for _ in range(n_resample // batch):
        idx = rng.integers(0, n_pool, size=(batch, n))
        b = centred[idx]
        for name, m in variants.items():
            pv[name].append(hotelling_p(b @ m.T, m @ exact))
    out["size"] = {}
    for name, p in pv.items():
        p = np.concatenate(p)
        r3, r2 = float(np.mean(p < 1e-3)), float(np.mean(p < 1e-2))
        out["size"][name] = {"columns": int(variants[name].shape[0]), "alpha_1e-3": r3,
                             "alpha_1e-3_mcse": float(np.sqrt(r3 * (1 - r3) / p.size)), "alpha_1e-2": r2,
                             "alpha_1e-2_mcse": float(np.sqrt(r2 * (1 - r2) / p.size)),
                             "ks_p": float(stats.kstest(p[:20000], "uniform").pvalue)}
    out["n_resample"] = int(n_resample)
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0] if a else "brown-vmf-d3", int(a[1]) if len(a) > 1 else 2000, int(a[2]) if len(a) > 2 else 100000)
