"""Monte Carlo estimators with their standard errors.

* :mod:`simkit.estimators.infonce`: the InfoNCE loss and the streaming estimator of the finite-k gap (C1);
* :mod:`simkit.estimators.search`: similarity search on unseen data, D_k and its constants (C2);
* :mod:`simkit.estimators.population`: population risk and generalisation of a trained embedding (C3);
* :mod:`simkit.estimators.norms`: the gap's sensitivity to the norms of unnormalised embeddings (C5);
* :mod:`simkit.estimators.population`: also the paired R_k(phi) - R_k(reference) on fresh tuples;
* :mod:`simkit.estimators.finite`: the gap and retrieval estimators on a finite population;
* :mod:`simkit.estimators.labelled`: gap_k and D_k on a finite labelled population (same-class kernel);
* :mod:`simkit.estimators.loss_difference`: block means of |l_k(psi) - l_k(phi)| and its bounds (C4).
"""

from __future__ import annotations

from simkit.estimators.infonce import GapEstimator, infonce_losses, k_grid
from simkit.estimators.search import SearchEstimator, search_statistics

__all__ = ["GapEstimator", "infonce_losses", "k_grid", "SearchEstimator", "search_statistics"]
