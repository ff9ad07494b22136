"""Builders for the schema entries every study spells out: an estimate with its Monte Carlo standard
error and per-block raw values, and a verdict with its reason.

>>> sorted(estimate_vars("gap", ("setting", "k"), "finite-k gap", "block mean of G_k", nats=True, raw=True))
['gap', 'gap_mcse', 'raw_gap']

The long names follow one pattern (``"<long name>, in nats"``, ``"MCSE of <name>, in nats"``,
``"per-block <long name>"``) so that reports can label a value and its band from the schema alone.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from simkit.runner.study import Var
from simkit.stats.analysis import mean_mcse

__all__ = ["estimate_vars", "verdict_vars", "rate_vars", "block_means", "cell_grid", "BLOCK_MCSE"]

#: the description of a block mean's MCSE
BLOCK_MCSE = "sd over blocks / sqrt(n_blocks)"


def estimate_vars(name: str, dims: tuple[str, ...], long_name: str, description: str, *, units: str = "1",
                  nats: bool = False, mcse: str | None = BLOCK_MCSE, raw: bool | tuple[str, ...] = False,
                  raw_name: str | None = None, raw_description: str | None = None) -> dict[str, Var]:
    """The schema entries of one estimate: ``name``, ``name_mcse`` and optionally its raw blocks.

    Parameters
    ----------
    name, dims, long_name, description, units
        The estimate (a :class:`~simkit.runner.Var`); ``nats=True`` appends ", in nats" to the long
        names of the estimate, its MCSE and its raw values.
    mcse : str or None
        Description of ``<name>_mcse``; None: no MCSE variable (a value without one, e.g. exact).
    raw : bool or tuple of str
        True adds ``raw_<raw_name>`` with dims ``dims`` and ``"block"`` after the cell dimension (the
        first); a tuple gives the raw dims explicitly.
    raw_name, raw_description
        Name of the per-block output (default ``name``) and the raw variable's description (default
        ``description``).
    """
    suffix = ", in nats" if nats else ""
    out = {name: Var(dims, long_name + suffix, units, description)}
    if mcse is not None:
        out[f"{name}_mcse"] = Var(dims, f"MCSE of {name}{suffix}", units, mcse)
    if raw is not False:
        raw_dims = tuple(raw) if isinstance(raw, tuple) else (*tuple(dims)[:1], "block", *tuple(dims)[1:])
        out[f"raw_{raw_name or name}"] = Var(raw_dims, f"per-block {long_name}{suffix}", units,
                                             description if raw_description is None else raw_description)
    return out


def verdict_vars(name: str, dims: tuple[str, ...], long_name: str, rule: str, *,
                 reason_long_name: str = "why the check did not pass", reason_name: str | None = None
                 ) -> dict[str, Var]:
    """``name`` (``"pass"``, ``"fail"`` or ``"error"``, described by its ``rule``) and its reason
    ``<name>_reason`` (or ``reason_name``), empty when it passed: the pair that
    :func:`simkit.runner.verdicts.verdict` fills."""
    return {name: Var(dims, long_name, "1", rule),
            reason_name or f"{name}_reason": Var(dims, reason_long_name, "1", "empty when it passed")}


def block_means(raw: xr.Dataset, names: dict[str, str] | list[str], *, axis: int = 1) -> dict:
    """The values of :func:`estimate_vars` entries from the raw blocks: ``{name: mean, name_mcse: MCSE}``
    over the block axis (``axis``, 1 after the cell dimension) of ``raw_<stat>``, for ``names`` a list
    of names (stat = name) or a dict name -> per-block stat (:func:`simkit.stats.analysis.mean_mcse`)."""
    out = {}
    for name, stat in (names.items() if isinstance(names, dict) else ((n, n) for n in names)):
        out[name], out[f"{name}_mcse"] = mean_mcse(raw[f"raw_{stat}"].values, axis=axis)
    return out


def cell_grid(raw: xr.Dataset, shape: tuple[int, ...], shapes: dict[str, tuple[int, ...]] | None = None):
    """``grid(name)``: a variable of the raw dataset over its cell dimension (first), laid out as ``shape``
    (e.g. (setting, tau) of a full factorial design, cells in row-major order); a variable the raw
    dataset lacks (no task of that stage finished) is NaN with trailing shape ``shapes[name]``."""
    shapes = shapes or {}

    def grid(name):
        if name not in raw:
            return np.full((*shape, *shapes.get(name, ())), np.nan)
        v = raw[name].values
        return v.reshape(*shape, *v.shape[1:])
    return grid


#: long name and description of each per-setting :func:`simkit.stats.analysis.rate_verdict` field of :func:`rate_vars`
_RATE_TEXT = {
    "slope": ("log-log slope of {what}", "WLS of log curve on log k and 1/k over k >= k_min "
              "(simkit.stats.analysis.rate_verdict); -1 under the claim, -1/2 under the 1/sqrt(k) alternative"),
    "slope_se": ("jackknife standard error of the {what} slope", "delete-one-block jackknife"),
    "slope_ci_low": ("95% interval for the {what} slope, lower", "Student t, n_blocks - 1 df"),
    "slope_ci_high": ("95% interval for the {what} slope, upper", "Student t, n_blocks - 1 df"),
    "slope_p_half": ("p-value of {what} slope = -1/2", "two-sided t test, jackknife SE"),
    "slope_p_one": ("p-value of {what} slope = -1", "two-sided t test, jackknife SE"),
    "slope_verdict_low": ("verdict interval for the {what} slope, lower", "level 1 - {alpha:g}"),
    "slope_verdict_high": ("verdict interval for the {what} slope, upper", "level 1 - {alpha:g}"),
    "k_min": ("smallest k in the {what} fits", "smallest grid k >= k_min_factor * expansion_scale"),
}


def rate_vars(what: str, alpha: float, *, prefix: str = "", cell: str = "setting", fields=tuple(_RATE_TEXT),
              fit: str | None = None) -> dict:
    """Schema entries (dims ``(cell,)``) of the :func:`simkit.stats.analysis.rate_verdict` fields
    ``fields`` of a curve ``what`` (e.g. "gap_k"), named ``prefix + field``; ``fit`` names the fitted curve
    (dims ``(cell, "k")``, with ``<prefix>resid_rate``), None: no such entries."""
    out = {f"{prefix}{f}": Var((cell,), _RATE_TEXT[f][0].format(what=what), "1",
                               _RATE_TEXT[f][1].format(alpha=alpha)) for f in fields}
    if fit is not None:
        out[fit] = Var((cell, "k"), f"fitted {what}, in nats", "1", "exp of the WLS fit of log curve on log k and 1/k")
        out[f"{prefix}resid_rate"] = Var((cell, "k"), f"standardised residual of the {what} rate fit", "1",
                                         "(log curve - fit) / (mcse / curve); only k >= k_min enter the fit")
    return out
