"""A minimal out-of-tree simkit study: the mean of fair coin flips is 1/2 (docs/writing-a-study.md)."""

from __future__ import annotations

import numpy as np
from scipy import stats

from simkit.stats.analysis import mean_mcse
from simkit.runner import Check, Param, Study, Var

ALPHA = 1e-3


def _check(ds):
    i = 0
    z = (float(ds["mean"].values[i]) - 0.5) / float(ds["mean_mcse"].values[i])
    n = ds.sizes["block"]
    ok = abs(z) <= stats.t.isf(ALPHA / 2, n - 1)
    return {"estimate": ds["mean"].values[i], "estimate_mcse": ds["mean_mcse"].values[i],
            "verdict": "pass" if ok else "fail", "detail": f"t = {z:+.2f} on {n - 1} df"}


class CoinFlip(Study):
    name = "coinflip"
    claim = "demo"
    title = "A fair coin lands heads half the time"
    cell_dim = "setting"
    params = {
        "n_blocks": Param("n_blocks", int, 16, "replicate blocks", low=2, high=10000, quick=8),
        "flips": Param("flips", int, 1000, "flips per block", low=1, high=10**7),
    }
    schema = {
        "setting": Var(("setting",), "design setting", "1", "one fair coin"),
        "p": Var(("setting",), "probability of heads", "1", "the coin's true probability"),
        "raw_heads": Var(("setting", "block"), "fraction of heads per block", "1", "raw replicate results"),
        "mean": Var(("setting",), "fraction of heads", "1", "mean over blocks"),
        "mean_mcse": Var(("setting",), "Monte Carlo standard error of mean", "1", "sd over blocks / sqrt(n)"),
    }
    checks = (Check("demo", "fraction of heads = 1/2 (Student t)", _check, ALPHA),)

    def cells(self, cfg):
        return [{"setting": "fair", "p": 0.5}]

    def block_dims(self, cfg):
        return {"heads": ()}, {}

    def generate(self, cell, cfg, prep, rng):
        return {"heads": np.array(rng.binomial(cfg["flips"], cell["p"]) / cfg["flips"])}

    def summarise(self, raw, cfg):
        mean, se = mean_mcse(raw["raw_heads"].values, axis=1)
        return {"mean": mean, "mean_mcse": se}

    def report_sections(self, doc, ds):
        doc.heading(self.title)
        doc.text(f"fraction of heads {float(ds['mean'].values[0]):.4f} ± {float(ds['mean_mcse'].values[0]):.4f}")

    def summary_text(self, ds):
        return f"heads: {float(ds['mean'].values[0]):.4f} ± {float(ds['mean_mcse'].values[0]):.4f}"


STUDY = CoinFlip()
