"""Size of the bootstrap max-t curve test (truth_tests.max_t_test) on real quick-design blocks.

Follow-up of curve_test_robustness.py, which showed that the 14-column Hotelling curve test is
anti-conservative on asymmetry's brown-vmf-d3 blocks (size 0.0052 +- 0.0002 at alpha = 1e-3). Same
resampling world: a pool of blocks drawn with the study's own estimator, recentred on the exact curve
(so the null holds exactly, with the real blocks' shape), and 48-block resamples of it. For each
resample, the Hotelling F p-value (as used until now) and the max-t p-value of the library's own
``max_t_test`` with ``n_boot`` resamples. Reports the size of both at 1e-3, 2e-3, 1e-2 and 5e-2 with
their binomial MCSE, and a positive control: the same resamples with the mean shifted by 4 standard
errors of the 48-block mean at one k (k = 256), where both tests must reject often. The curve max-t ignores
the strong correlation between neighbouring k, which Hotelling exploits against such a bump; the study's
second test, dgap (differences gap_k - gap_2k), sees it: "max-t of differences, shifted" is max_t_test on
the differenced blocks (a stand-in for the study's dgap_cv blocks, which this pool does not draw).

    python docs/diagnostics/curve_test_max_t.py [SETTING] [N_POOL] [N_RESAMPLE] [N_BOOT]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from curve_test_robustness import hotelling_p, pool
from simkit.stats.truth_tests import max_t_test


def main(setting="brown-vmf-d3", n_pool=3000, n_resample=20000, n_boot=1999):
    t0 = time.time()
    k, blocks, exact, cov, cfg = pool(setting, n_pool)
    n = int(cfg["n_blocks"])
    centred = blocks - blocks.mean(0) + exact
    j = int(np.flatnonzero(k == 256)[0])
    shift = np.zeros(k.size)
    shift[j] = 4 * blocks[:, j].std(ddof=1) / np.sqrt(n)
    rng, boot = np.random.default_rng(12), np.random.default_rng(13)
    res = {"F": [], "max-t": [], "F shifted": [], "max-t shifted": [], "max-t of differences, shifted": []}
    dmap = np.eye(k.size)[:-1] - np.eye(k.size)[1:]
    for _ in range(n_resample):
        b = centred[rng.integers(0, n_pool, size=n)]
        res["F"].append(hotelling_p(b[None], exact)[0])
        res["max-t"].append(max_t_test(b, exact, rng=boot, n_boot=n_boot).p_value)
        if len(res["F shifted"]) < 2000:
            res["F shifted"].append(hotelling_p((b + shift)[None], exact)[0])
            res["max-t shifted"].append(max_t_test(b + shift, exact, rng=boot, n_boot=n_boot).p_value)
            res["max-t of differences, shifted"].append(
                max_t_test((b + shift) @ dmap.T, dmap @ exact, rng=boot, n_boot=n_boot).p_value)
    out = {"setting": setting, "n_pool": n_pool, "n_blocks": n, "n_resample": n_resample, "n_boot": n_boot,
           "shift": {"k": 256, "standard_errors": 4.0}}
    for name, p in res.items():
        p = np.asarray(p)
        out[name] = {f"alpha_{a:g}": {"rate": float(np.mean(p < a)),
                                      "mcse": float(np.sqrt(np.mean(p < a) * (1 - np.mean(p < a)) / p.size))}
                     for a in (1e-3, 2e-3, 1e-2, 5e-2)}
        out[name]["n"] = int(p.size)
    out["seconds"] = round(time.time() - t0, 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0] if a else "brown-vmf-d3", *(int(x) for x in a[1:4]))
