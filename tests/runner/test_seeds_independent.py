"""Two studies never share random numbers: the cell key of every seed includes the
study's name (simkit.runner.seeds).

Before, the key hashed only the cell's coordinates, so ``rate_k`` and ``search_ce`` drew the same
anchors, positives and negatives for ``uniform-d3`` (and ``vmf-d8``): their raw per-block InfoNCE
losses agreed to 4e-15, and the C1 and C2 verdicts counted one fluctuation twice. Deterministic
tests (no false-failure rate).
"""

from __future__ import annotations

import numpy as np
import pytest

from simkit.runner import cell_key, resolve_config, run_study, task_seed
from studies.rate_k import STUDY as RATE_K
from studies.search_ce import STUDY as SEARCH_CE

#: a tiny design both studies accept, identical where they share parameters
TINY = {"settings": "uniform-d3", "k_max": 256, "n_blocks": 8, "block_anchors": 64, "pilot_blocks": 2,
        "n_mc": 4096}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for study, extra in ((RATE_K, {}), (SEARCH_CE, {"rank_anchors": 32})):
        cfg = resolve_config(study, {**TINY, **extra}, quick=True)
        assert cfg["seed"] == RATE_K.default_seed == SEARCH_CE.default_seed  # the same study seed
        res = run_study(study, cfg, tmp_path_factory.mktemp(study.name) / f"{study.name}.nc", progress=False)
        assert res.completed and not res.errors
        out[study.name] = (cfg, res.dataset)
    return out


def test_same_cell_same_seed_would_share_draws(runs):
    """The control: the two studies' block generators, given the same SeedSequence (what the old
    scheme gave them), draw the same anchors, positives and negatives, so their per-block losses
    agree to rounding. Without this, the next test could pass for a reason other than the seeds."""
    (cfg_r, ds_r), (cfg_s, ds_s) = runs["rate_k"], runs["search_ce"]
    cell = RATE_K.cells(cfg_r)[0]
    assert cell == SEARCH_CE.cells(cfg_s)[0]  # the same coordinates
    prep_r = {"coef": ds_r["prep_coef"].values[0]}
    prep_s = {"coef": ds_s["prep_coef"].values[0]}
    for block in range(2):
        seq = np.random.SeedSequence(12345, spawn_key=(block,))
        a = RATE_K.generate(cell, cfg_r, prep_r, np.random.default_rng(seq))["loss"]
        b = SEARCH_CE.generate(cell, cfg_s, prep_s, np.random.default_rng(seq))["loss"]
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_rate_k_and_search_ce_draw_independently(runs):
    """With the study name in the cell key, the same cell gets other seeds in the two studies, and
    the raw per-block losses of rate_k and search_ce differ in every block (they agreed to 4e-15)."""
    (cfg_r, ds_r), (cfg_s, ds_s) = runs["rate_k"], runs["search_ce"]
    cell = RATE_K.cells(cfg_r)[0]
    assert cell_key("rate_k", cell) != cell_key("search_ce", cell)
    np.testing.assert_array_equal(ds_r["cell_key"].values[0], cell_key("rate_k", cell))
    np.testing.assert_array_equal(ds_s["cell_key"].values[0], cell_key("search_ce", cell))
    assert (task_seed(cfg_r["seed"], "rate_k", cell, 1, 0).spawn_key
            != task_seed(cfg_s["seed"], "search_ce", cell, 1, 0).spawn_key)
    a, b = ds_r["raw_loss"].values[0], ds_s["raw_loss"].values[0]  # (block, k)
    assert a.shape == b.shape == (TINY["n_blocks"], 9) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    diff = np.abs(a - b)
    assert np.all(diff.max(axis=1) > 1e-6), diff.max(axis=1)  # every block: other draws
    # the block means over k = 1: independent draws, not one fluctuation counted twice
    assert not np.allclose(a[:, 0], b[:, 0], rtol=0, atol=1e-9)
