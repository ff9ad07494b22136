"""Anchor samples of :func:`simkit.diagnose` and the standard errors of their means.

Without labels the anchors are a simple random sample without replacement of the rows that have a
positive. With labels they are a systematic sample of those rows sorted by label (random order
within a label, random start): implicit stratification, each label represented in proportion, and
the variance estimated from successive differences of the ordered sample (Wolter 2007, ch. 8),
which does not need two anchors per label. Both carry the finite-population correction, so a
census (every row an anchor) has standard error 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["Design", "systematic_sample"]


@dataclass(frozen=True)
class Design:
    """An anchor sample: ``rows`` (in sampling order) out of ``n_pop`` rows, ``stratified`` or not."""

    rows: NDArray[np.intp]
    n_pop: int
    stratified: bool

    @property
    def census(self) -> bool:
        return self.rows.size >= self.n_pop

    def mean_se(self, values: NDArray, within_var: NDArray | None = None) -> tuple[NDArray, NDArray]:
        """Mean over the sample (axis 0) and its standard error.

        ``within_var`` is each anchor's own Monte Carlo variance (augmentation views); NaN there
        (one view per row) makes the between-anchor spread stand in for it, an upper bound.
        """
        v = np.asarray(values, dtype=float)
        n = v.shape[0]
        mean = v.mean(axis=0)
        f = min(n / self.n_pop, 1.0)
        if n < 2:
            return mean, np.full(np.shape(mean), 0.0 if f >= 1 else np.nan)
        if self.stratified:
            diff = np.diff(v, axis=0)
            s2 = np.sum(diff * diff, axis=0) / (2.0 * (n - 1))
        else:
            s2 = v.var(axis=0, ddof=1)
        var = (1.0 - f) * s2 / n
        if within_var is not None:
            w = float(np.mean(within_var))
            var = s2 / n if np.isnan(w) else var + f * w / n
        return mean, np.sqrt(np.maximum(var, 0.0))


def systematic_sample(population: NDArray[np.intp], n: int, strata: NDArray | None, gen) -> Design:
    """``n`` anchors from ``population`` (all of it when n >= its size), see the module docstring."""
    n_pop = population.size
    if n >= n_pop:
        return Design(np.asarray(population, dtype=np.intp), n_pop, strata is not None)
    if strata is None:
        return Design(np.sort(gen.choice(population, size=n, replace=False)), n_pop, False)
    order = np.lexsort((gen.random(n_pop), strata))  # by label, random within a label
    step = n_pop / n
    pos = np.floor(gen.uniform(0.0, step) + step * np.arange(n)).astype(np.intp)
    return Design(population[order[np.minimum(pos, n_pop - 1)]], n_pop, True)
