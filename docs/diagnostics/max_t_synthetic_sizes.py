"""Offline sizes of the max-t curve test on synthetic blocks: the constants MAXT_SIZE and F_LOGNORMAL_SIZE of
tests/test_truth_tests.py come from this script (10 000 replicates per case, seeds 777001-777003, which no test
uses; B = 999). Cases: "gauss" (Gaussian blocks, n = 48, p = 14, correlation 0.9^|i-j|), "gauss_v" (the same with
a Monte Carlo exact curve of covariance V = S/n), "lognormal" (each block the mean of 128 anchors exp(1.5 z)).

    python docs/diagnostics/max_t_synthetic_sizes.py CASE N_REPLICATES     (results: max_t_synthetic_sizes.json)
"""

import sys, json, numpy as np
from scipy import stats

from simkit.stats.truth_tests import max_t_test, curve_test
which = sys.argv[1]; R = int(sys.argv[2])
rng = np.random.default_rng(777000 + {"gauss": 1, "gauss_v": 2, "lognormal": 3}[which])
n, p = 48, 14
idx = np.arange(p); cov = 0.9 ** np.abs(idx[:, None] - idx[None, :]); chol = np.linalg.cholesky(cov)
mu = np.linspace(1.0, 0.01, p)
def lognormal_blocks(rng):
    z = rng.standard_normal((n, 128, p)) @ chol.T
    return np.exp(1.5 * z).mean(axis=1)
ln_mean = np.exp(1.5**2 / 2)
pm, pf = [], []
for r in range(R):
    if which == "gauss":
        b = mu + rng.standard_normal((n, p)) @ chol.T; m = mu; v = None
    elif which == "gauss_v":
        b = mu + rng.standard_normal((n, p)) @ chol.T; v = cov / n; m = mu + np.linalg.cholesky(v) @ rng.standard_normal(p)
    else:
        b = lognormal_blocks(rng); m = np.full(p, ln_mean); v = None
    pm.append(max_t_test(b, m, exact_cov=v, rng=rng, n_boot=999).p_value)
    pf.append(curve_test(b, m, exact_cov=v).p_value)
pm, pf = np.array(pm), np.array(pf)
out = {"which": which, "R": R}
for a in (0.01, 0.05):
    for name, pv in (("maxt", pm), ("F", pf)):
        r_ = float(np.mean(pv < a)); out[f"{name}_{a}"] = [r_, float(np.sqrt(r_ * (1 - r_) / R))]
print(json.dumps(out))
