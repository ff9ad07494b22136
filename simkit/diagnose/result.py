"""The result of :func:`simkit.diagnose`: :class:`Diagnosis`, with ``k_needed``, ``bias_at`` and exports."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from simkit.stats.analysis import mean_mcse
from simkit.diagnose.estimates import constants, slope_test

__all__ = ["Diagnosis", "KNeeded", "Bias"]

_Z = 1.959963984540054  # two-sided 95% normal quantile
#: the expansion c1/k + c2/k^2 serves beyond k_max only when it is within this fraction of the exact
#: curve at k_max/2 and k_max (its remainder is O(1/k^3), so the fraction shrinks beyond) and
#: k_max >= 16 x the expansion scale
EXPANSION_RTOL = 0.1
_K_TOP = 2**50  # the largest k an extrapolated answer may take


@dataclass(frozen=True)
class KNeeded:
    """Negatives needed for |bias| <= eps: ``k`` (None: more than ``more_than``) and its 95% interval."""

    eps: float
    k: int | None
    low: int | None
    high: int | None
    source: str  # "exact", "expansion" or "beyond range"
    more_than: int | None = None
    note: str = ""

    def __str__(self) -> str:
        if self.k is None:
            return f"more than {self.more_than}"
        hi = f"more than {self.more_than}" if self.high is None else str(self.high)
        return f"{self.k} (95% interval {self.low} to {hi}; {self.source})"


@dataclass(frozen=True)
class Bias:
    """The finite-k bias ``gap_k`` in nats at ``k``, its MCSE and where it comes from."""

    k: int
    value: float
    mcse: float
    source: str  # "exact", "expansion" or "unavailable"
    note: str = ""

    def __str__(self) -> str:
        if not math.isfinite(self.value):
            return f"not available at k = {self.k} ({self.note})"
        return f"{self.value:.4g} ± {self.mcse:.2g} nats at k = {self.k} ({self.source})"


class Diagnosis:
    """The finite-k InfoNCE bias of a data set's embeddings (see :func:`simkit.diagnose`).

    Attributes: ``ce``, ``c1``, ``c2`` (and ``*_mcse``), ``expansion_scale``, ``k`` (the training
    set-up's k or None), ``eps``, ``k_max``, ``convention``. Methods: :meth:`k_needed`,
    :meth:`bias_at`, :meth:`curve`, :meth:`summary`, :meth:`plot`, :meth:`to_xarray`,
    :meth:`to_pandas`, :meth:`to_pdf`.
    """

    @classmethod
    def _build(cls, *, n, d, kind, tau, eps, convention, k, k_how, batch, k_max, grid, design_a, design_e, stats_a,
               stats_e, curves, ks_mc, n_no_positive, label_note, n_labels, n_views, in_batch=None) -> "Diagnosis":
        self = cls.__new__(cls)
        self.n_rows, self.dim, self.kernel, self.tau, self.eps = n, d, kind, tau, eps
        self.convention, self.k, self.k_how, self.from_batch, self.k_max = convention, k, k_how, batch, k_max
        self.grid = grid
        self._design_a, self._design_e, self._curves = design_a, design_e, curves
        self.n_no_positive, self.label_note, self.n_labels, self.n_views = n_no_positive, label_note, n_labels, n_views
        views = kind == "positive_embeddings"
        ca, ce = constants(stats_a, views), constants(stats_e, views)
        self._pa, self._pe = ca, ce
        for name in ("ce", "c1", "c2"):
            m, se = design_a.mean_se(ca[name], ca.get(name + "_w"))
            setattr(self, name, float(m))
            setattr(self, name + "_mcse", float(se))
        self.expansion_scale = float(max(np.mean(stats_a["ratio2"]), np.mean(stats_a["mu0"])))
        self._view_var_e = float(np.mean(stats_e["var_mu0"])) if views else 0.0
        if views and np.isnan(self._view_var_e):
            self._view_var_e = float(np.var(stats_e["mu0"], ddof=1)) if stats_e["mu0"].size >= 2 else np.nan
        self.retrieval = {}
        if not views:
            for name in ("top1", "rec10"):
                vals = stats_a[name]
                ok = np.isfinite(vals)
                if ok.any():
                    sub = type(design_a)(design_a.rows[ok], max(int(round(ok.sum() * design_a.n_pop / vals.size)),
                                                                 int(ok.sum())), design_a.stratified)
                    m, se = sub.mean_se(vals[ok])
                    self.retrieval[name] = (float(m), float(se))
        self.ks_mc = ks_mc
        self.gap_mc, self.gap_mc_mcse = mean_mcse(stats_a["gap_blocks"])
        self.risk_mc, self.risk_mc_mcse = mean_mcse(stats_a["risk_blocks"])
        self.tuples_per_anchor = int(stats_a["tuples_per_anchor"])
        self.slope_fit, self.slope_note = slope_test(ks_mc, stats_a["gap_blocks"], self.expansion_scale)
        self._check_expansion()
        self._dense = None
        self.batch = None if in_batch is None else self._batch_answer(in_batch)
        return self

    def _batch_answer(self, batch) -> dict:
        """The in-batch scheme's c1 and limit (docs/theory.md §16), the first-order bias c1_batch/k at the
        set-up's k, and the batch size from which |c1_batch|/k <= eps (k = 2B - 2 or B - 1)."""
        (c1, c1_se), (lim, lim_se) = (tuple(float(v) for v in batch[n]) for n in ("c1", "limit"))
        scheme, k = batch["scheme"], self.k
        k_eps = max(1, math.ceil(abs(c1) / self.eps))
        b_eps = (k_eps + 3) // 2 if scheme == "ntxent" else k_eps + 1
        return {"scheme": scheme, "c1": c1, "c1_mcse": c1_se, "limit": lim, "limit_mcse": lim_se,
                "bias": c1 / k, "bias_mcse": c1_se / k, "k_needed": k_eps, "batch_needed": max(2, b_eps),
                "limit_minus_ce": lim - self.ce}

    # ------------------------------------------------------------------ curves
    def _exact(self, ks) -> tuple[NDArray, NDArray]:
        kf = np.asarray(ks, dtype=float)
        vals = self._curves.values(kf)
        m, se = self._design_e.mean_se(vals)
        if self.kernel == "positive_embeddings":  # the views' own sampling error, to first order in 1/k
            se = np.sqrt(se**2 + self._view_var_e / len(self._curves) / kf**2)
        return m, se

    def _expansion(self, ks) -> tuple[NDArray, NDArray]:
        kf = np.asarray(ks, dtype=float)
        per = self._pa["c1"][:, None] / kf[None, :] + self._pa["c2"][:, None] / kf[None, :] ** 2
        return self._design_a.mean_se(per)

    def _check_expansion(self) -> None:
        km = self.k_max
        ks = np.array([km // 2, km], dtype=float)
        exact = self._curves.values(ks).mean(axis=0)
        pred = (self._pe["c1"][:, None] / ks + self._pe["c2"][:, None] / ks**2).mean(axis=0)
        rel = np.abs(exact - pred) / np.maximum(np.abs(exact), 1e-300)
        scale = self.expansion_scale
        self.expansion_rel_error = float(rel[-1])
        if km < 16 * scale:
            self.expansion_ok, self.expansion_note = False, (
                f"k_max = {km} is below 16 x the expansion scale ({scale:.4g})")
        elif not np.all(rel <= EXPANSION_RTOL):
            self.expansion_ok, self.expansion_note = False, (
                f"c1/k + c2/k^2 differs from the exact curve by {100 * rel.max():.3g}% at k <= k_max = {km} "
                f"(more than {100 * EXPANSION_RTOL:g}%)")
        else:
            self.expansion_ok, self.expansion_note = True, (
                f"c1/k + c2/k^2 within {100 * rel.max():.2g}% of the exact curve at k = {km // 2} and {km}")

    def curve(self, ks) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The bias ``gap_k`` (nats) and its MCSE at integer ``ks``: exact for k <= k_max, the
        expansion beyond where it is shown to hold, NaN otherwise."""
        kf = np.atleast_1d(np.asarray(ks, dtype=float))
        m, se = np.full(kf.size, np.nan), np.full(kf.size, np.nan)
        inside = kf <= self.k_max
        if inside.any():
            m[inside], se[inside] = self._exact(kf[inside])
        if (~inside).any() and self.expansion_ok:
            m[~inside], se[~inside] = self._expansion(kf[~inside])
        return m, se

    def bias_at(self, k: int | None = None) -> Bias:
        """The bias at ``k`` (default: the training set-up's k)."""
        if k is None:
            if self.k is None:
                raise ValueError("'k' must be given (no k, batch_size or queue was given to diagnose)")
            k = self.k
        if isinstance(k, (bool, np.bool_)) or not float(k).is_integer() or k < 1 or k > _K_TOP:
            raise ValueError(f"'k' must be an integer in [1, {_K_TOP}], got {k!r}")
        k = int(k)
        m, se = self.curve([k])
        if k <= self.k_max:
            return Bias(k, float(m[0]), float(se[0]), "exact")
        if self.expansion_ok:
            return Bias(k, float(m[0]), float(se[0]), "expansion", self.expansion_note)
        return Bias(k, float("nan"), float("nan"), "unavailable",
                    f"beyond the exact curve's k_max = {self.k_max} and {self.expansion_note}")

    def _dense_grid(self) -> tuple[NDArray, NDArray, NDArray]:
        if self._dense is None:
            small = np.arange(1, min(64, self.k_max) + 1, dtype=float)
            geo = np.unique(np.round(np.geomspace(64, self.k_max, max(2, int(math.log(self.k_max / 64) / math.log(1.03)))
                                                  if self.k_max > 64 else 2)))
            ks = np.unique(np.concatenate([small, geo[geo <= self.k_max], [float(self.k_max)]]))
            m, se = self._exact(ks)
            self._dense = (ks, m, se)
        return self._dense

    def k_needed(self, eps: float | None = None) -> KNeeded:
        """Smallest k with |gap_j| <= eps for every j >= k, and its 95% interval.

        Found on the exact curve (a grid of all k <= 64 and 3% steps beyond, then bisection over the
        integers of the last step); beyond k_max from c1/k + c2/k^2 where that is shown to hold
        there, otherwise "more than k_max". The interval inverts the pointwise 95% band
        gap ± 1.96 MCSE (anchor sampling).
        """
        eps = self.eps if eps is None else float(eps)
        if not (eps > 0 and math.isfinite(eps)):
            raise ValueError(f"'eps' must be a finite number > 0, got {eps!r}")
        ks, m, se = self._dense_grid()
        answers = []
        for sign in (0.0, -1.0, 1.0):
            answers.append(self._search(ks, m, se, sign, eps))
        (k0, s0), (klo, _), (khi, _) = answers
        if k0 is None:
            return KNeeded(eps, None, klo, None, "beyond range", more_than=(_K_TOP if self.expansion_ok else self.k_max),
                           note=("" if self.expansion_ok else self.expansion_note))
        return KNeeded(eps, k0, klo, khi, s0, more_than=(None if khi is not None else
                                                         (_K_TOP if self.expansion_ok else self.k_max)),
                       note=("" if khi is not None or self.expansion_ok else self.expansion_note))

    def _search(self, ks, m, se, sign, eps) -> tuple[int | None, str]:
        bad = np.maximum(np.abs(m) + sign * _Z * np.nan_to_num(se), 0.0) > eps
        if bad[-1]:  # beyond k_max
            if not self.expansion_ok:
                return None, "beyond range"
            kx = np.unique(np.round(np.geomspace(self.k_max, _K_TOP, 2000)))
            mx, sx = self._expansion(kx)
            bx = np.maximum(np.abs(mx) + sign * _Z * sx, 0.0) > eps
            if bx[-1]:
                return None, "beyond range"
            j = int(np.flatnonzero(bx)[-1])
            lo, hi = int(kx[j]), int(kx[j + 1])
            fn = lambda kk: self._expansion([kk])  # noqa: E731
            src = "expansion"
        else:
            if not bad.any():
                return 1, "exact"
            j = int(np.flatnonzero(bad)[-1])
            lo, hi = int(ks[j]), int(ks[j + 1])
            fn = lambda kk: self._exact([kk])  # noqa: E731
            src = "exact"
        while hi - lo > 1:  # |gap| > eps at lo, <= eps at hi
            mid = (lo + hi) // 2
            mm, ss = fn(mid)
            if max(abs(float(mm[0])) + sign * _Z * float(np.nan_to_num(ss[0])), 0.0) > eps:
                lo = mid
            else:
                hi = mid
        return hi, src

    # ------------------------------------------------------------------ text
    def summary(self) -> str:
        """The console text of ``simkit diagnose``."""
        from simkit.diagnose.text import summary
        return summary(self)

    def __repr__(self) -> str:
        return f"<Diagnosis N={self.n_rows} d={self.dim} {self.kernel} tau={self.tau:g} k_needed={self.k_needed()}>"

    # ------------------------------------------------------------------ exports
    def to_xarray(self):
        """The diagnosis as a CF-1.11 xarray Dataset (curves on ``grid`` and the Monte Carlo grid)."""
        from simkit.diagnose.text import to_dataset
        return to_dataset(self)

    def __getitem__(self, name):
        return self.to_xarray()[name]

    def to_pandas(self):
        """The curves on ``grid`` as a pandas DataFrame indexed by k (scalars in ``.attrs``)."""
        ds = self.to_xarray()
        df = ds[["gap_exact", "gap_exact_mcse", "gap_predicted"]].to_dataframe()
        df.attrs = {name: float(ds[name]) for name in ds.data_vars if ds[name].ndim == 0}
        return df

    def plot(self, ax=None):
        """The bias curve on ``ax`` (a new figure when None): exact with its 95% band, Monte Carlo,
        the expansion and ±eps, on a symmetric-log axis. Returns the axes."""
        from simkit.diagnose.plot import plot_curve
        return plot_curve(self, ax)

    def to_pdf(self, path) -> None:
        """Write the report (the curve and the answers) as a PDF."""
        from simkit.diagnose.plot import write_pdf
        write_pdf(self, path)
