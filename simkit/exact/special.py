"""Public special functions of the von Mises–Fisher family (stable in log space).

* :func:`log_vmf_norm` — log C_d(κ), the log normalising constant of vMF on S^{d-1};
* :func:`mean_resultant_length` — A_d(κ) = I_{d/2}(κ) / I_{d/2-1}(κ) = E[μ·y].

Implemented in :mod:`simkit._jit.special` (with their Numba twins); re-exported here for studies.
"""

from __future__ import annotations

from simkit._jit.special import log_vmf_norm, mean_resultant_length

__all__ = ["log_vmf_norm", "mean_resultant_length"]
