"""Exact quantities (no Monte Carlo where a closed form or quadrature exists), docs/theory.md §2–4.

* :mod:`simkit.exact.formulas`: log Z, m1, Q, CE(M, Q), the bias constant c1, the exact gap, expansion
  scales, for φ = identity (re-exported here: ``simkit.exact.cross_entropy`` etc.);
* :mod:`simkit.exact.curve`: the exact finite-k gap curve and the expansion constants c1, c2;
* :mod:`simkit.exact.in_batch`: limits, c1, c2 and exact finite-batch risks of NT-Xent and CLIP-style
  in-batch negatives (docs/theory.md §16);
* :mod:`simkit.exact.minimiser`: the exact InfoNCE minimiser of a parametric score class on a finite
  set, its shift and excess constants (docs/theory.md §17);
* :mod:`simkit.exact.quadrature`: product quadrature on S^1 and S^2;
* :mod:`simkit.exact.special`: vMF special functions in log space;
* :mod:`simkit.exact.bounds`: values of the Theorem-1-type generalisation bound;
* :mod:`simkit.exact.divergence`: H = -E KL(M(x,.) || pi) and the largest KL(Q(x,.) || pi) over x;
* :mod:`simkit.exact.loss_bounds`: the loss-difference bounds of claim C4 (averaging and max);
* :mod:`simkit.exact.finite`: CE, c1, c2, the gap curve and D_k on a finite population (any embedding).
"""

from __future__ import annotations

from simkit.exact.formulas import *  # noqa: F401,F403
from simkit.exact.formulas import __all__ as _formulas_all

__all__ = list(_formulas_all)
