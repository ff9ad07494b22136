"""Statistics of replicate blocks: Monte Carlo standard errors, rate regressions, growth and
non-inferiority tests, and tests of Monte Carlo curves against exact truth.

* :mod:`simkit.stats.analysis`: :func:`mean_mcse`, :func:`jackknife`, :func:`fit_rate`, verdict helpers;
* :mod:`simkit.stats.trend`: :func:`trend_test`, :func:`equivalence_test`, :func:`one_sided_rate`,
  :func:`growth_non_inferiority`, :func:`non_inferiority` (growth, trend and non-inferiority tests), and the
  one definition of a detectable effect, :func:`detectable_t` at power :data:`DETECT_POWER` = 0.9;
* :mod:`simkit.stats.truth_tests`: :func:`curve_test`, :func:`max_t_test` and their kin;
* :mod:`simkit.stats.sensitivity`: the rate verdict under other k_min factors, block sizes and pilots;
* :mod:`simkit.stats.retrieval`: paired tests of retrieval along training (the pre-stated test, a collapsed start);
* :mod:`simkit.stats.bound_growth`: the non-inferiority rule that a loss-difference bound does not grow in k.
"""

from __future__ import annotations

from simkit.stats.analysis import fit_rate, jackknife, mean_mcse
from simkit.stats.trend import (DETECT_POWER, detectable_t, equivalence_test, growth_non_inferiority, non_inferiority,
                                one_sided_rate, trend_test)
from simkit.stats.truth_tests import curve_test, max_t_test

__all__ = ["mean_mcse", "jackknife", "fit_rate", "trend_test", "equivalence_test", "one_sided_rate",
           "growth_non_inferiority", "non_inferiority", "curve_test", "max_t_test", "DETECT_POWER", "detectable_t"]
