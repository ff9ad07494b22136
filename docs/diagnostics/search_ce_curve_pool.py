"""Pool of quick-design search_ce blocks for sizing C2's curve test (protocols/search_ce_curve.md).

For one setting, ``N_GROUPS`` independent pilots (2 blocks each, the quick design's ``pilot_blocks``) and, per
pilot, ``N_PER_GROUP`` blocks of the quick design (256 queries, k_max = 16384) with that pilot's control-variate
coefficients: the study's own estimator (simkit.estimators.search.SearchEstimator), as in one seed of the study,
whose blocks are independent given the pilot. Only the control-variate curve ``d_cv`` is kept (rank_anchors = 1:
the retrieval metrics are not needed and cost time). Resumable: one .npy per group under OUT_DIR.

    python docs/diagnostics/search_ce_curve_pool.py SETTING N_GROUPS N_PER_GROUP OUT_DIR

Pools used: vmf-d8 40 groups x 100 blocks, uniform-d3 32 x 100 (about 0.1 CPU-s per block).
Seeds: SeedSequence([990_000 + group, index of the setting]), which no study or test uses.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from simkit import VMFKernel
from simkit.distributions.designs import SEARCH_SETTINGS, build_pi
from simkit.estimators.search import SearchEstimator


def main(setting: str, n_groups: int, n_per: int, out_dir: str) -> None:
    family, dim, kp, km, tau = SEARCH_SETTINGS[setting]
    est = SearchEstimator(build_pi({"pi": family, "dim": dim, "kappa_pi": kp}), VMFKernel(km), tau, 16384)
    os.makedirs(out_dir, exist_ok=True)
    for g in range(n_groups):
        path = os.path.join(out_dir, f"{setting}_g{g:03d}.npy")
        if os.path.exists(path):
            continue
        t0 = time.time()
        rng = np.random.default_rng(np.random.SeedSequence([990_000 + g, list(SEARCH_SETTINGS).index(setting)]))
        coef = est.calibrate(256, rng, n_blocks=2)
        blocks = np.array([est.block(256, rng, coef, rank_anchors=1)["d_cv"] for _ in range(n_per)])
        np.save(path, blocks)
        print(f"{setting} group {g}: {n_per} blocks in {time.time() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
