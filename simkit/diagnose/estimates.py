"""Per-anchor constants CE, c1, c2 of :func:`simkit.diagnose` and the rate test of its Monte Carlo gap."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from simkit.stats.analysis import fit_rate, mean_mcse

__all__ = ["constants", "slope_test"]


def constants(st: dict, views: bool) -> dict[str, NDArray]:
    """Per-anchor CE, c1, c2 (and their within-anchor view variances) from a pass's moments."""
    sig2 = st["ratio2"] - 1.0
    kap3 = st["ratio3"] - 3.0 * st["ratio2"] + 2.0
    out = {"ce": st["log_z"] - st["ms"], "c1": st["mu0"] - 0.5 * sig2,
           "c2": -0.5 * st["nu0"] + kap3 / 3.0 + sig2 * st["mu0"] - 0.75 * sig2**2}
    if views:
        out["ce_w"] = st["var_ms"]
        out["c1_w"] = st["var_mu0"]
        out["c2_w"] = 0.25 * st["var_nu0"] + sig2**2 * st["var_mu0"] - sig2 * st["cov_mu_nu"]
    return out


def slope_test(ks: NDArray, blocks: NDArray, scale: float):
    """The rate test on the Monte Carlo gap, or the reason it is not assessed.

    Assessed only with at least 6 grid points (a factor 32 on the default grid: over a narrower range
    log k and 1/k are nearly collinear and the slope is not identified) at k >= 16 x the expansion
    scale, where the Monte Carlo gap is at least 4 MCSE away from 0 (a log of the gap means
    something there).
    """
    gap, se = mean_mcse(blocks)
    k_min = 16.0 * scale
    sel = ks >= k_min
    if np.sum(sel) < 6:
        return None, (f"not assessed: the Monte Carlo grid (k <= {int(ks[-1])}) has fewer than 6 points at "
                      f"k >= 16 x the expansion scale ({k_min:.4g}); a larger mc_k_max (--mc-k-max) reaches them")
    z = np.abs(gap[sel]) / se[sel]
    if not np.all(np.isfinite(z)) or np.any(z < 4) or not (np.all(gap[sel] > 0) or np.all(gap[sel] < 0)):
        return None, (f"not assessed: the Monte Carlo gap is within 4 MCSE of 0 at some k >= {int(ks[sel][0])} "
                      f"(more tuples needed for a rate)")
    sign = 1.0 if np.all(gap[sel] > 0) else -1.0
    fit = fit_rate(ks, sign * blocks, int(ks[sel][0]), with_inverse=True)
    if not np.isfinite(fit.slope):
        return None, "not assessed: too few blocks for the jackknife"
    return fit, ("fitted to log gap" if sign > 0 else "fitted to log(-gap): the gap is negative there")

