"""The study protocol: what a study declares once (parameters, cells, stages, variable schema,
checks, report sections), and the registry that finds studies through entry points.

A study is found through the ``simkit.studies`` entry-point group: a package declares, in its
``pyproject.toml``,

.. code-block:: toml

    [project.entry-points."simkit.studies"]
    my_study = "my_package.my_module:STUDY"

and ``simkit list`` / ``simkit run my_study`` find it (docs/writing-a-study.md).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata as md
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import xarray as xr

from simkit.claims.protocol import analysis_label
from simkit.runner.params import Param

__all__ = ["Var", "Check", "Study", "get_study", "study_names", "UndeclaredVariable", "ENTRY_POINT_GROUP"]

#: the entry-point group that registers studies
ENTRY_POINT_GROUP = "simkit.studies"

#: unit strings udunits misreads for a quantity in nats ("nat" is nano-technical-atmospheres, a pressure)
_BAD_UNITS = re.compile(r"(^|[^A-Za-z])nats?([^A-Za-z]|$)")


@dataclasses.dataclass(frozen=True)
class Var:
    """One declared dataset variable or coordinate: dimensions, CF ``long_name``, udunits ``units``
    and a ``description``.

    Losses, entropies and their variances are dimensionless: ``units="1"`` with "nats" in the
    long name or description. The unit string ``"nat"`` is refused (udunits reads it as a pressure).
    """

    dims: tuple[str, ...]
    long_name: str
    units: str
    description: str

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(self.dims))
        if not isinstance(self.units, str) or not self.units.strip():
            raise ValueError(f"'units' of {self.long_name!r} must be a udunits string, got {self.units!r}")
        if _BAD_UNITS.search(self.units):
            raise ValueError(f"'units' of {self.long_name!r} must not be {self.units!r}: udunits reads 'nat' as "
                             "nano-technical-atmospheres; use '1' and say 'nats' in the long_name")

    @property
    def attrs(self) -> dict[str, str]:
        return {"long_name": self.long_name, "units": self.units, "description": self.description}

    def like(self, dims: tuple[str, ...] | None = None, **changes) -> Var:
        """A copy with other dims and/or fields."""
        return dataclasses.replace(self, dims=self.dims if dims is None else tuple(dims), **changes)


class UndeclaredVariable(ValueError):
    """A study produced a variable its schema does not declare, or with other dimensions."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One claim check of a study, from which ``simkit validate`` builds a claim row.

    ``evaluate(ds)`` returns a dict with ``estimate``, ``estimate_mcse``, ``verdict`` ("pass", "fail"
    or "error") and ``detail``. ``false_fail_rate`` is the stated probability that the check fails
    when the claim holds (a float, or a callable of the dataset); ``None`` marks a deterministic
    check (e.g. of a proven inequality), which has no such rate.

    ``pvalues(ds)`` (optional) returns ``{test name: (p-value, alpha)}`` for the check's component
    tests: each p-value is Uniform(0, 1) when the claim holds (its reference distribution), and the
    test rejects when ``p < alpha``. An entry ``(p, alpha, "bound")`` marks a test of a one-sided
    bound, whose p-value is uniform only at the boundary (calibrated one-sided: ``bound-test`` rows of
    :mod:`simkit.claims.calibrate`). ``simkit calibrate`` collects them over many seeds to
    demonstrate the false-failure rates (rejection frequency, Kolmogorov–Smirnov against uniform).
    """

    claim: str
    statistic: str | Callable[[xr.Dataset], str]
    evaluate: Callable[[xr.Dataset], dict]
    false_fail_rate: float | Callable[[xr.Dataset], float] | None = None
    pvalues: Callable[[xr.Dataset], dict[str, tuple[float, float] | tuple[float, float, str]]] | None = None
    #: path of the pre-registered protocol (``protocols/<study>.md``) whose rule this check applies;
    #: its rows are confirmatory only on a full-design dataset of that protocol (simkit.claims.protocol)
    protocol: str | None = None
    #: short name of the check in the claim table's one-line statistic (default: from ``statistic``)
    label: str | None = None
    #: "claim" (tests the claim) or "diagnostic" (a control of a rule: kept in its own row)
    role: str = "claim"

    def row(self, ds: xr.Dataset) -> dict:
        out = dict(self.evaluate(ds))
        rate = self.false_fail_rate(ds) if callable(self.false_fail_rate) else self.false_fail_rate
        stat = self.statistic(ds) if callable(self.statistic) else self.statistic
        return {"claim": self.claim, "statistic": stat, "estimate": float(out["estimate"]),
                "estimate_mcse": float(out["estimate_mcse"]),
                "false_fail_rate": float("nan") if rate is None else float(rate),
                "verdict": str(out["verdict"]), "detail": str(out.get("detail", "")),
                "analysis": analysis_label(ds, self.protocol), "role": self.role,
                **({"label": self.label} if self.label else {})}


class Study:
    """Base class of a simkit study: subclasses set the class attributes and implement the stages.

    Declared once, on the class:

    * ``name``, ``claim``, ``title``, ``ademp`` (Morris et al. 2019), ``references``;
    * ``params``: ``{name: Param}``, overridable with ``--set``;
    * ``schema``: ``{name: Var}`` for every variable and coordinate the study writes (raw
      ``raw_<name>`` and ``prep_<name>`` ones included); the runner applies it and refuses any
      variable it does not declare;
    * ``checks``: :class:`Check` objects, from which :meth:`claim_rows` builds the claim rows.

    Stages (pure functions of their arguments; randomness only from the ``rng`` given):

    * ``cells(cfg) -> list[dict]``: the design, one dict of JSON scalars per cell; ``cell_dim``
      names the cell dimension (e.g. ``setting``);
    * ``prepare(cell, cfg, rng) -> dict[str, ndarray]``: per-cell constants; or, where that is long
      and splits into independent pieces (Monte Carlo integrals over chunks of anchors), set
      ``prepare_parts(cell, cfg)`` to their number and implement ``prepare_part(cell, cfg, part, rng)``
      (each part its own seed and task, run in parallel on a cluster) and ``combine_parts(cell, cfg,
      parts)`` (no randomness), which returns what ``prepare`` would;
    * ``generate(cell, cfg, prep, rng) -> dict[str, ndarray]``: one replicate block, shapes fixed by
      ``block_dims(cfg)``;
    * ``summarise(raw, cfg) -> dict[str, array] | xr.Dataset``: summaries with MCSE; a dict maps
      declared names to values (dims from the schema), merged into the raw dataset;
    * ``report_sections(doc, ds)``: the study's pages, from the dataset alone.
    """

    name: str = ""
    claim: str = ""
    title: str = ""
    ademp: dict[str, str] = {}
    references: str = ("N. Whiteley (2026), Similarity search generalisation in contrastive learning with "
                       "InfoNCE loss; simkit docs/theory.md")
    params: dict[str, Param] = {}
    schema: dict[str, Var] = {}
    checks: tuple[Check, ...] = ()
    #: declared summaries a complete dataset may lack (written by some designs only); ``simkit report``
    #: refuses a dataset that lacks any other declared variable but raw_* and prep_* ones
    #: (:func:`simkit.runner.run.check_dataset`)
    optional_vars: frozenset[str] = frozenset()
    cell_dim: str = "cell"
    #: block outputs that are text, one string a block (e.g. the errors of a nested run): assembled as
    #: ``raw_<name>`` (cell, block), "" where a block has none; not listed in ``block_dims``
    block_text: tuple[str, ...] = ()
    default_seed: int = 20261130

    def check_config(self, cfg: dict) -> None:
        """Cross-parameter checks (raise ValueError naming the parameter)."""

    def n_blocks(self, cfg: dict) -> int:
        return int(cfg["n_blocks"])

    def cells(self, cfg: dict) -> list[dict]:
        raise NotImplementedError

    def block_dims(self, cfg: dict) -> tuple[dict[str, tuple[str, ...]], dict[str, np.ndarray]]:
        """(variable -> dims after (cell, block)), (dim -> coordinate values)."""
        raise NotImplementedError

    def prepare(self, cell: dict, cfg: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        return {}

    def prepare_parts(self, cell: dict, cfg: dict) -> int:
        """Number of parts of this cell's preparation: 0 (default) runs ``prepare`` as one task."""
        return 0

    def prepare_part(self, cell: dict, cfg: dict, part: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Part ``part`` of a split preparation (seed stage 2, block ``part``)."""
        raise NotImplementedError

    def combine_parts(self, cell: dict, cfg: dict, parts: list[dict]) -> dict[str, np.ndarray]:
        """The cell's preparation from its parts' results (in part order); deterministic."""
        raise NotImplementedError

    def generate(self, cell: dict, cfg: dict, prep: dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def summarise(self, raw: xr.Dataset, cfg: dict) -> dict[str, Any] | xr.Dataset:
        return {}

    def attrs(self, cfg: dict) -> dict[str, Any]:
        """Study-specific global attributes of the dataset (e.g. a verdict's ``alpha``)."""
        return {}

    def peak_memory(self, cfg: dict):
        """An estimate of the memory of the largest task of this design, a
        :class:`simkit.runner.memory.PeakMemory`, or None (the default: not estimated). Before any task
        of an in-process run, the runner refuses a design whose estimate exceeds the memory the process
        may use (:func:`simkit.runner.memory.check_memory`); studies with large arrays declare it."""
        return None

    def nested_resumed(self) -> int:
        """Tasks that this study's tasks resumed from checkpoints of their own in this process (a study
        whose tasks run another study through the runner, as the seeds of ``simkit calibrate`` do); the
        runner adds them to the dataset's ``resumed_tasks``."""
        return 0

    def summary_text(self, ds: xr.Dataset) -> str:
        """The text printed after a run: by default one line per claim row
        (:func:`simkit.runner.verdicts.claim_summary`)."""
        from simkit.runner.verdicts import claim_summary
        return claim_summary(self.claim_rows(ds))

    def report_sections(self, doc, ds: xr.Dataset) -> None:
        """Add this study's pages (all but provenance) to a :class:`simkit.report.ReportDocument`: by
        default those declared in ``simkit.report.<name>`` (:func:`simkit.report.spec.study_sections`)."""
        from simkit.report.spec import study_sections
        study_sections(self.name)(doc, ds, study=self)

    def report(self, ds: xr.Dataset, path: str | os.PathLike) -> int:
        """Write the study's PDF: a title page, :meth:`report_sections`, provenance. Returns the page count."""
        from simkit.report import study_report
        return study_report(self, ds, path)

    def claim_rows(self, ds: xr.Dataset) -> list[dict]:
        """Rows for ``simkit validate``, one per declared :class:`Check`."""
        return [check.row(ds) for check in self.checks]

    def __reduce_ex__(self, protocol):
        # an installed study travels to Dask workers by name (each worker uses its own installed copy);
        # any other Study object (a subclass in a script or test) by value
        try:
            installed = get_study(self.name)
        except ValueError:
            installed = None
        if installed is self:
            return get_study, (self.name,)
        return super().__reduce_ex__(protocol)


#: (sys.path entries with their modification times) -> the entry-point table read under them
_EP_CACHE: dict[tuple, dict[str, md.EntryPoint]] = {}


def _path_stamp() -> tuple:
    stamp = []
    for p in sys.path:
        try:
            stamp.append((p, os.stat(p or ".").st_mtime_ns))
        except OSError:
            stamp.append((p, None))
    return tuple(stamp)


def _entry_points() -> dict[str, md.EntryPoint]:
    """The installed studies' entry points by name. Reading them costs ~30 ms (every installed
    distribution's metadata) and a Dask run looks them up for every task it sends (an installed
    study is pickled by name), so the table is kept until ``sys.path`` or the modification time of
    one of its directories changes (installing or removing a distribution changes its directory's)."""
    stamp = _path_stamp()
    eps = _EP_CACHE.get(stamp)
    if eps is None:
        eps = {}
        for ep in md.entry_points(group=ENTRY_POINT_GROUP):
            eps.setdefault(ep.name, ep)  # the first distribution on sys.path wins, as for imports
        _EP_CACHE.clear()
        _EP_CACHE[stamp] = eps
    return dict(eps)


def study_names() -> list[str]:
    """Names of the installed studies (the ``simkit.studies`` entry-point group), sorted."""
    return sorted(_entry_points())


def get_study(name: str) -> Study:
    """The installed study called ``name`` (ValueError listing the known ones otherwise)."""
    eps = _entry_points()
    if not isinstance(name, str) or name not in eps:
        raise ValueError(f"unknown study {name!r}; known studies: {', '.join(sorted(eps))}")
    obj = eps[name].load()
    study = obj() if isinstance(obj, type) else obj
    if not isinstance(study, Study) or study.name != name:
        raise ValueError(f"entry point {name!r} ({eps[name].value}) is not a simkit Study named {name!r}")
    return study
