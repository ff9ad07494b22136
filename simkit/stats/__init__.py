"""Statistics of replicate blocks: Monte Carlo standard errors, rate regressions, growth and
non-inferiority tests, and tests of Monte Carlo curves against exact truth.

* :mod:`simkit.stats.analysis`: :func:`mean_mcse`, :func:`jackknife`, :func:`fit_rate`,
  :func:`growth_non_inferiority`, verdict helpers;
* :mod:`simkit.stats.truth_tests`: :func:`curve_test`, :func:`max_t_test` and their kin.
"""

from __future__ import annotations

from simkit.stats.analysis import fit_rate, growth_non_inferiority, jackknife, mean_mcse
from simkit.stats.truth_tests import curve_test, max_t_test

__all__ = ["mean_mcse", "jackknife", "fit_rate", "growth_non_inferiority", "curve_test", "max_t_test"]
