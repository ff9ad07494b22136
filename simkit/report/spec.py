"""A declarative vocabulary for report pages, drawn by :func:`render` from the saved dataset alone.

Templates (titles, cells, text) name dataset variables in braces: ``{a±b}`` is a value with its MCSE
(:func:`format_pm`), ``{a}`` / ``{a:fmt}`` a value, ``{facet}`` the facet's label; a variable over the
facet dimension is read at the current facet; a name that is no variable is looked up in the attributes,
the run's configuration, and derived generically: ``n_<dim>``, ``<coord>_min`` / ``<coord>_max``,
``<coord>_values``, ``level`` and ``t_crit``. Axis labels come from each variable's ``long_name``. A study's
module is its declarations ``PAGES`` (with ``derive`` and ``REQUIRES``, :func:`study_sections`); its prose is
``pages/<study>.md`` (:func:`prose`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import xarray as xr
from scipy import stats
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from simkit.report.document import (COLORS, SETTINGS_PER_PAGE, SMALL, TITLE, ReportDocument, _json_attr, _legend,
                                    _log_axes, format_pm, label, residual_panel, wrap_text)

__all__ = ["Panel", "FigurePage", "Table", "ClaimTable", "TitlePage", "View", "Failures", "Text", "render", "label",
           "rate_columns", "rate_page", "constant_page", "residual_page", "VMF_SETTING", "verdict_heading", "gather",
           "cells", "family_curves",
           "scalar", "stack", "panel_title", "fin", "require", "fill", "config", "prose", "sections",
           "study_sections", "t_crit", "UNRESOLVED"]

Source = str | Callable[[xr.Dataset], str]

#: template names that resolved to nothing while filling (a misspelt field prints "n/a"; tests read this)
UNRESOLVED: set[str] = set()


@functools.cache
def prose(study: str) -> dict[str, str]:
    """The named paragraphs of ``pages/<study>.md``: each ``## name`` heading starts one, its lines are
    joined by spaces and a blank line inside it starts a new line (keeping that line's indentation)."""
    text = (Path(__file__).with_name("pages") / f"{study}.md").read_text(encoding="utf-8")
    out = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        name, _, body = part.partition("\n")
        paras = re.split(r"\n\s*\n", body.strip("\n"))
        out[name.strip()] = "\n".join(p[:len(p) - len(p.lstrip())] + " ".join(p.split()) for p in paras)
    return out


#: the key of a residual page (:class:`Panel` ``kind="residual"``), ending its caption
RESIDUAL_KEY = prose("common")["residual_key"]


# ------------------------------------------------------------------------------------------------
# shared helpers

def fin(x, fmt: str = ".3g") -> str:
    """``x`` formatted with ``fmt`` (true minus sign), or ``n/a`` when it is not a finite number."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "n/a"
    return format(x, fmt).replace("-", "\u2212") if math.isfinite(x) else "n/a"


def config(ds: xr.Dataset) -> dict:
    """The run's configuration (the dataset's ``config`` attribute) as a dict; empty when unreadable."""
    cfg = _json_attr(ds, "config", {})
    return cfg if isinstance(cfg, dict) else {}


def t_crit(ds: xr.Dataset, df_dim: str = "block") -> float:
    """The two-sided Student t critical value at the dataset's ``alpha`` on ``n_<df_dim> − 1`` degrees of freedom."""
    alpha, n = float(ds.attrs.get("alpha", np.nan)), ds.sizes.get(df_dim, 0)
    return float(stats.t.isf(alpha / 2, n - 1)) if math.isfinite(alpha) and n > 1 else math.nan


def sections(name: str, pages: Sequence, derive: Callable | None = None, requires: Sequence[str] = ()):
    """A study's report sections ``(doc, ds, study=None)``: draw ``pages`` from ``derive(ds)`` (display
    quantities computed from the saved variables) or ``ds``, after checking that the dataset holds the
    variables the declarations draw (each panel's ``var`` and ``also``, each table's verdict columns) and
    ``requires`` (what the views read: a :class:`View` draws from a dataset of its own)."""
    def draw(doc: ReportDocument, ds: xr.Dataset, study=None) -> None:
        try:
            require(ds, requires, name)
            shown = derive(ds) if derive else ds
            require(shown, sorted(set(_drawn(pages))), name)
            render(doc, shown, pages, study=study)
        except KeyError as e:  # a variable that a derivation or a view reads (xarray names it in quotes)
            missing = re.match(r"No variable named '([^']+)'", str(e.args[0]))
            require(ds, [missing.group(1) if missing else str(e.args[0])], name)
            raise
    draw.__doc__ = f"The pages of the {name} study (all but provenance), from its dataset alone."
    return draw


def study_sections(name: str):
    """The sections of study ``name`` declared in ``simkit.report.<name>``: its ``PAGES``, drawn from its
    ``derive(ds)`` if it has one, after checking its ``REQUIRES`` (:func:`sections`); none without a module."""
    if not name.isidentifier() or importlib.util.find_spec(f"simkit.report.{name}") is None:
        return lambda doc, ds, study=None: None
    module = importlib.import_module(f"simkit.report.{name}")
    return sections(name, module.PAGES, getattr(module, "derive", None), getattr(module, "REQUIRES", ()))


def _drawn(items: Sequence):
    """The variables that declarations outside a :class:`View` draw: panels' ``var`` and ``also``, tables'
    verdicts."""
    for item in items:
        if isinstance(item, TitlePage):
            yield from _drawn(item.then)
        elif isinstance(item, FigurePage):
            yield from (v for p in item.panels for v in (p.var, *(p.also or ())))
        elif isinstance(item, Table):
            yield from ((item.verdict,) if isinstance(item.verdict, str) else item.verdict or ())


def verdict_heading(what: str, var: str = "verdict", noun: str = "settings"):
    """A table heading counting the passing entries of ``var`` ("n/a" entries are not counted)."""
    def heading(ds: xr.Dataset) -> str:
        v = [str(x) for x in ds[var].values if str(x) != "n/a"]
        return f"{what}: {v.count('pass')} of {len(v)} {noun} pass"
    return heading


def scalar(ds: xr.Dataset, name: str):
    """The value of the scalar variable ``name``, NaN when the dataset has none."""
    return ds[name].values.item() if name in ds.variables else np.nan


def gather(ds: xr.Dataset, rows: dict[str, str], fields: Sequence[str], dim: str = "row") -> xr.Dataset:
    """Scalar variables named ``<prefix><field>`` as one dataset over ``dim``: a row per ``label: prefix``
    of ``rows`` (missing variables are NaN), for a :class:`Table` of checks that share their fields."""
    cols = {f: [scalar(ds, p + f) for p in rows.values()] for f in fields}
    return xr.Dataset({f: (dim, np.asarray(v, dtype=object if any(isinstance(x, str) for x in v) else float))
                       for f, v in cols.items()}, coords={dim: list(rows)}, attrs=ds.attrs)


def stack(ds: xr.Dataset, names: dict[str, str], dim: str, name: str, attrs: dict) -> xr.Dataset:
    """``ds`` with ``name`` (and ``name_mcse``): the variables ``names`` (label: variable, each with its
    ``_mcse``) along a new dimension ``dim``, to draw several estimates on one panel (``Panel.series``)."""
    def cat(suffix: str) -> xr.DataArray:
        return xr.concat([ds[v + suffix] if v + suffix in ds else ds[v] * np.nan for v in names.values()],
                         dim=dim, coords="minimal", compat="override").assign_coords({dim: list(names)})
    return ds.assign({name: cat("").assign_attrs(attrs), name + "_mcse": cat("_mcse")})


def cells(ds: xr.Dataset, dim: str, first: str, second: str, name: str = "") -> xr.Dataset:
    """``ds`` with (``first``, ``second``) stacked into ``dim``, both kept as variables along it: one table row or
    facet per pair, labelled "<first>, <name or second> = <second>"."""
    out = ds.stack({dim: (first, second)}).reset_index(dim)
    labels = [f"{a}, {name or second} = {fin(b, 'g')}" for a, b in zip(out[first].values, out[second].values)]
    return out.assign_coords({dim: labels}).transpose(dim, ...)


def family_curves(ds: xr.Dataset, families: dict[str, str]) -> xr.Dataset:
    """E[G] (``gap_cv`` ± MCSE) against d of each family of a design over ``point`` present in ``ds``, one row
    per ``label: prefix`` of ``families`` (as for :func:`gather`; the family is the prefix without its "_"),
    with ``fit``: the line 2^(a + b log2 d) of the family's slope ``<prefix>b`` through the mean of log2 E[G],
    over the family's own d."""
    fams = ds["family"].values.astype(str)
    rows = {lab: p for lab, p in families.items() if p.rstrip("_") in fams}
    curves = xr.concat([ds[["gap_cv", "gap_cv_mcse", "d"]].isel(point=np.flatnonzero(fams == p.rstrip("_")))
                        .swap_dims(point="d").reset_coords(drop=True) for p in rows.values()], dim="family",
                       join="outer").assign_coords(family=list(rows))
    lx, lg = np.log2(curves["d"].astype(float)), np.log2(curves["gap_cv"].where(curves["gap_cv"] > 0))
    b = xr.DataArray([scalar(ds, p + "b") for p in rows.values()], dims="family")
    fit = 2 ** (lg.mean("d") + b * (lx - lx.where(lg.notnull()).mean("d")))
    curves["fit"] = fit.where(curves["gap_cv"].notnull())
    curves["gap_cv"].attrs = {"long_name": "E[G], control variate, in nats", "units": "1"}
    curves["d"].attrs = {"long_name": "embedding dimension d", "units": "1"}
    return curves


def require(ds: xr.Dataset, names: Sequence[str], study: str) -> None:
    """Raise ValueError naming the variables a study's report needs and ``ds`` lacks."""
    missing = [v for v in names if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a {study} dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run {study}')")


def _meta(ds: xr.Dataset, name: str):
    """An attribute, a configuration key, ``n_<dim>`` (a dimension's size), ``<coord>_min`` / ``<coord>_max``,
    ``<coord>_values`` (listed), ``level`` (1 − alpha) or ``t_crit`` (:func:`t_crit`) named ``name``; NaN if none."""
    cfg, coord, _, end = config(ds), *name.rpartition("_")
    if name in ds.attrs or name in cfg:
        return ds.attrs[name] if name in ds.attrs else cfg[name]
    if name in ("level", "t_crit") and "alpha" in ds.attrs:
        return 1 - float(ds.attrs["alpha"]) if name == "level" else t_crit(ds)
    if end in ("min", "max") and coord in ds.coords and ds[coord].ndim == 1:
        return getattr(ds[coord].values, end)()
    if end == "values" and coord in ds.coords and ds[coord].ndim == 1:
        return ", ".join(fin(v, "g") for v in ds[coord].values)
    return ds.sizes[name[2:]] if name.startswith("n_") and name[2:] in ds.sizes else np.nan


def _at(ds: xr.Dataset, name: str, facet: str | None, i: int | None):
    """Value of ``name`` at facet ``i`` (a scalar variable as is), else :func:`_meta`."""
    if name not in ds.variables:
        return _meta(ds, name)
    v = ds[name]
    if facet is not None and i is not None and facet in v.dims:
        v = v.isel({facet: i})
    return v.values.item() if v.ndim == 0 else v.values


_BARE = re.compile(r"[A-Za-z_]\w*(?:±[A-Za-z_]\w*)?(?::[^{}]*)?")
_FIELD = re.compile(r"(?<![\^_])\{([A-Za-z_][\w]*)(?:±([A-Za-z_][\w]*))?(?::([^}]*))?\}")


def fill(template: Source, ds: xr.Dataset, facet: str | None = None, i: int | None = None) -> str:
    """Fill a template: ``{a±b}`` -> :func:`format_pm`, ``{a}`` / ``{a:fmt}`` -> a value, ``{facet}``;
    braces after ``^`` or ``_`` are mathematics (``e^{s_0}``), not fields. A callable's text is filled in turn."""
    if callable(template):
        return fill(template(ds), ds) if i is None else template(ds, i)

    def one(m: re.Match) -> str:
        name, se, fmt = m.groups()
        if name == "facet":
            if facet is None:
                return ""
            v = ds[facet].values[i]
            return fin(v, fmt) if fmt and not isinstance(v, (str, np.str_)) else str(v)
        v = _at(ds, name, facet, i)
        if np.ndim(v) > 0:  # a variable over a dimension the text is not faceted on: the run's setting instead
            v = _meta(ds, name)
        if v is np.nan:
            UNRESOLVED.add(name)
        if se:
            return format_pm(v, _at(ds, se, facet, i))
        if isinstance(v, (str, np.str_, list, dict)):
            return str(v)
        whole = not fmt and isinstance(v, (int, float, np.number)) and float(v).is_integer() and abs(v) < 1e15
        return str(int(v)).replace("-", "\u2212") if whole else fin(v, fmt or "g")

    return _FIELD.sub(one, template)


# ------------------------------------------------------------------------------------------------
# the vocabulary

@dataclasses.dataclass(frozen=True)
class Panel:
    """``var`` against ``x`` for one facet: ``band`` its MCSE (±2 MCSE band and bars; ``<var>_mcse`` when the
    dataset has it); ``reference`` and ``fit`` a variable over ``x`` or coefficients ``(a0, a1, ...)`` of
    ``a0 + a1/x + ...`` (drawn over the fit range ``x >= fit_range``, shaded; ``zoom`` shows only it); ``hline``
    a scalar (``hline_band`` its MCSE, by default ``<hline>_mcse`` likewise);
    ``slopes`` reference power laws through the first fitted point; ``also`` further variables as lines;
    ``kind="residual"`` standardised residuals, ``kind="qq"`` a −log10 QQ plot of the p-values ``var``
    against Uniform(0, 1) (``level`` the rejection threshold), ``kind="forest"`` one row per value of ``x``
    (estimate ± 2 ``band`` against ``reference`` and ``level``); ``series`` a further dimension, one curve per value
    (``series_hline`` a variable drawn as a dashed line in each curve's colour);
    ``level`` a dashed horizontal line; ``absolute`` draws ``|var|`` (hollow where negative);
    ``marks`` scalar variables drawn as vertical lines (e.g. an onset and a scale), labelled ``mark_labels``."""

    var: str
    x: str = "k"
    band: str | None = None
    reference: str | tuple[str, ...] | None = None
    reference_band: str | None = None
    hline: str | None = None
    hline_band: str | None = None
    fit: str | tuple[str, ...] | None = None
    fit_range: str | None = None
    slopes: tuple[float, ...] = ()
    also: tuple[str, ...] = ()
    also_labels: tuple[str, ...] = ()
    kind: str = "points"
    series: str | None = None
    series_hline: str | None = None
    level: float | str | None = None
    level_label: str = ""
    absolute: bool = False
    logx: bool = True
    logy: bool = False
    symlog: bool = False
    zoom: bool = False
    ylim: tuple[float, float] | None = None
    title: Source = "{facet}"
    reason: str = "verdict_reason"
    marks: tuple[str, ...] = ()
    mark_labels: tuple[str, ...] = ()
    ylabel: str | None = None
    label: str | None = None
    fit_label: str = "fit"
    reference_label: str = "exact"
    hline_label: str = "exact value ± 2 MCSE"


@dataclasses.dataclass(frozen=True)
class FigurePage:
    """Panels in rows, one column per facet value (``per_page`` a page), or in rows of ``per_page`` when
    ``facet`` is None; a pair of dimensions ``(rows, columns)`` lays out the first panel on their grid;
    ``per_page=(rows, columns)`` lays out the first panel once per facet value on pages of that grid. The
    caption of a page with residual panels ends with their key."""

    title: Source
    panels: tuple[Panel, ...]
    caption: Source = ""
    subtitle: Source = ""
    facet: str | tuple[str, str] | None = "setting"
    per_page: int | tuple[int, int] = SETTINGS_PER_PAGE


@dataclasses.dataclass(frozen=True)
class Table:
    """One row per value of ``dim``; ``columns`` are ``(header, template)`` pairs or a variable name (headed
    by its ``long_name``); a template that is a bare field (``v``, ``v:fmt``, ``v±se``) is filled as one,
    a bare ``v`` with its ``v_mcse`` when there is one; ``verdict`` one or several coloured verdict columns."""

    columns: tuple[str | tuple[str, Source], ...]
    dim: str = "setting"
    heading: Source = ""
    verdict: str | tuple[str, ...] | None = "verdict"
    size: float = 7.5


@dataclasses.dataclass(frozen=True)
class ClaimTable:
    """The study's checks (``Study.claim_rows``) with estimate ± MCSE, false-fail rate and verdict; drawn
    only when :func:`render` is given the study."""

    heading: str = "The study's claim checks (simkit validate)"


@dataclasses.dataclass(frozen=True)
class Failures:
    """The values of ``dim`` whose verdict is not "pass" or whose tasks raised, with their ``reasons`` (by default
    ``<verdict>_reason`` of each of ``verdicts``)."""

    dim: str = "setting"
    reasons: tuple[str, ...] | None = None
    verdicts: tuple[str, ...] = ("verdict",)


@dataclasses.dataclass(frozen=True)
class Text:
    """A paragraph (template or callable of the dataset); ``heading`` (a template) puts a heading above it."""

    text: Source
    heading: Source = ""
    size: float = SMALL


@dataclasses.dataclass(frozen=True)
class View:
    """``items`` drawn from ``how(ds)``: another view of the dataset (stacked rows, a subset, derived rows),
    a list of them (the items drawn for each in turn), or None (nothing drawn)."""

    how: Callable[[xr.Dataset], xr.Dataset | list[xr.Dataset] | None]
    items: tuple


@dataclasses.dataclass(frozen=True)
class TitlePage:
    """The title, the provenance line (with the protocol, then ``note``), ``texts``, the dataset's ADEMP
    statement when ``ademp`` is set, then the items ``then``."""

    texts: tuple[Source, ...] = ()
    ademp: bool = False
    then: tuple = ()
    note: Source = ""


# ------------------------------------------------------------------------------------------------
# declarations shared by the studies of a rate in k (C1, C2)

def rate_columns(prefix: str = "") -> tuple:
    """Table columns of a rate fit whose summaries are named ``<prefix>slope`` etc.: the fit range's first k,
    the slope ± jackknife SE, its 95% interval over the verdict's interval, the p-value of slope = −1/2."""
    s = prefix + "slope"
    return ((("k_min", f"{prefix}k_min"), ("slope ± jackknife SE", f"{s}±{s}_se"), ("CI 95%\nCI of the verdict",
            f"[{{{s}_ci_low:.4f}}, {{{s}_ci_high:.4f}}]\n[{{{s}_verdict_low:.4f}}, {{{s}_verdict_high:.4f}}]"),
             ("p of slope = −1/2", f"{s}_p_half:.2g")))


def rate_page(page: str, var: str, fit: str, caption: Source, prefix: str = "", **kw) -> FigurePage:
    """``var`` on log–log axes (± 2 MCSE) with the WLS fit of log ``var`` on log k and 1/k over the fit range
    ``k ≥ <prefix>k_min`` and reference slopes −1 and −1/2; each panel title gives the fitted slope."""
    s = prefix + "slope"
    return FigurePage(page, (Panel(var, fit=fit, fit_range=prefix + "k_min", slopes=(-1.0, -0.5), logy=True, **{
        "title": f"{{facet}}: slope {{{s}±{s}_se}}", "fit_label": "WLS fit (log k and 1/k)", **kw}),),
        caption=caption, subtitle="slope of the WLS fit ± jackknife SE in each panel title")


def constant_page(page: str, var: str, name: str, const: tuple[str, str], caption: Source, exact: str = "exact",
                  prefix: str = "", top: dict | None = None, zoom: dict | None = None, **kw) -> FigurePage:
    """``var`` = k·``name`` approaching the constant ``const[0]`` (``<const>_exact`` ± 2 MCSE, the ``exact``
    one), with the fit ``const[0] + const[1]/k`` over ``k ≥ <prefix>k_min``: over every k (``top``: further
    fields of that panel) and over the fit range alone (``zoom``)."""
    c, c2 = const
    common = dict(hline=f"{c}_exact", fit=(f"{c}_estimate", f"{c2}_estimate"), fit_range=prefix + "k_min",
                  label=f"{name} ± 2 MCSE", fit_label=f"fit {c} + {c2}/k (k ≥ k_min)",
                  hline_label=f"{exact} {c} ± 2 MCSE")
    return FigurePage(page, (
        Panel(var, **{**common, "title": f"{{facet}}: {c} {{{c}_estimate±{c}_estimate_mcse}}", **kw, **(top or {})}),
        Panel(var, zoom=True, **{**common, "title": f"k ≥ {{{prefix}k_min}}: {exact} {c} {{{c}_exact±{c}_exact_mcse}}",
                                 **kw, **(zoom or {})})),
        caption=caption, subtitle=f"estimated {c} ± jackknife MCSE in each top panel title")


def residual_page(page: str, caption: Source, *fits: tuple[str, str, str]) -> FigurePage:
    """The standardised residuals of each fit ``(variable, what, first k of its fit range)``."""
    return FigurePage(page, tuple(Panel(v, kind="residual", fit_range=k, title=f"{{facet}}: {what}")
                                   for v, what, k in fits), caption=caption)


#: the columns describing a setting of a vMF model (rate_k, search_ce)
VMF_SETTING = (("setting", "facet"), ("π", "{pi}\nκ_π = {kappa_pi}"), ("d", "dim"), ("κ_M", "kappa_m"), ("τ", "tau"))


# ------------------------------------------------------------------------------------------------
# the renderer

def render(doc: ReportDocument, ds: xr.Dataset, items: Sequence, *, study=None) -> None:
    """Draw the declared ``items`` in order; ``study`` answers :class:`ClaimTable`."""
    for item in items:
        draw = {TitlePage: _title_page, FigurePage: _figure_pages, Table: _table, ClaimTable: _claim_table,
                Failures: _failures, Text: _text}.get(type(item))
        if draw is not None:
            draw(doc, ds, item, study)
        elif isinstance(item, View):
            views = item.how(ds)
            for view in views if isinstance(views, list) else [views] if views is not None else []:
                render(doc, view, item.items, study=study)
        elif callable(item):  # a custom page of a study's report module
            item(doc, ds)
        else:
            raise TypeError(f"cannot render {item!r}")


def _text(doc: ReportDocument, ds: xr.Dataset, t: Text, study=None) -> None:
    if t.heading:
        doc.heading(fill(t.heading, ds))
    doc.text(fill(t.text, ds), size=t.size)


def _title_page(doc: ReportDocument, ds: xr.Dataset, page: TitlePage, study) -> None:
    cfg = config(ds)
    a = ds.attrs
    doc.new_page()
    doc.text(str(a.get("title", getattr(study, "title", ""))), size=TITLE, weight="bold", after=0.02)
    doc.text(f"simkit study '{a.get('study', '?')}' · claim {a.get('claim', '?')} · dataset created "
             f"{a.get('created', '?')} · seed {a.get('seed', '?')} · commit {str(a.get('git_commit', '?'))[:12]}"
             f"{' · quick design' if cfg.get('quick') else ''}"
             + (f" · protocol {a['protocol_path']} (sha256 {str(a.get('protocol_sha256', '?'))[:12]}, commit "
                f"{str(a.get('protocol_commit', '?'))[:12]})" if "protocol_path" in a else "") + fill(page.note, ds),
             size=SMALL, color="0.3", after=0.12)
    for t in page.texts:
        doc.text(fill(t, ds), after=0.1)
    ademp = _json_attr(ds, "ademp", {})
    if page.ademp and isinstance(ademp, dict) and ademp:
        doc.key_values([(k, str(v)) for k, v in ademp.items()], key_width=0.8, value_width=7.0)
    render(doc, ds, page.then, study=study)


def _table(doc: ReportDocument, ds: xr.Dataset, t: Table, study=None) -> None:
    header, cells = [], []
    for col in t.columns:
        head, cell = col if isinstance(col, tuple) else (None, col)
        if isinstance(cell, str) and _BARE.fullmatch(cell):  # a field without braces: "v", "v:fmt", "v±se"
            name = cell.split(":")[0]
            cell = f"{{{name}±{name}_mcse}}" if cell == name and f"{name}_mcse" in ds.variables else f"{{{cell}}}"
        header.append(label(ds, col) if head is None else head)
        cells.append(cell)
    names = (t.verdict,) if isinstance(t.verdict, str) else t.verdict or ()
    names = [n for n in names if n in ds]
    header += ["verdict"] if len(names) == 1 and isinstance(t.verdict, str) else [label(ds, n) for n in names]
    rows, colors = [], {}
    for i in range(ds.sizes[t.dim]):
        row = [fill(c, ds, t.dim, i) for c in cells]
        for n in names:
            v = str(ds[n].values[i])
            row.append(v.upper())
            colors[(i, len(row) - 1)] = COLORS.get(v, COLORS["head" if v == "n/a" else "fail"])
        rows.append(row)
    if t.heading:
        doc.heading(fill(t.heading, ds))
    doc.table(header, rows, colors=colors, size=t.size)


def _claim_table(doc: ReportDocument, ds: xr.Dataset, t: ClaimTable, study) -> None:
    rows, colors = [], {}
    for i, r in enumerate(study.claim_rows(ds) if study is not None else ()):
        rate = r["false_fail_rate"]
        rows.append([r["claim"], r["statistic"], format_pm(r["estimate"], r["estimate_mcse"]),
                     "deterministic" if not math.isfinite(rate) else f"{rate:.2g}", r["verdict"].upper(), r["detail"]])
        colors[(i, 4)] = COLORS.get(r["verdict"], COLORS["fail"])
    if rows:
        doc.heading(t.heading)
        doc.table(["claim", "statistic", "estimate ± MCSE", "false-fail rate", "verdict", "detail"], rows,
                  [0.4, 2.4, 1.2, 0.7, 0.55, 4.0], colors=colors)


def _failures(doc: ReportDocument, ds: xr.Dataset, f: Failures, study=None) -> None:
    n = ds.sizes[f.dim]
    outcome = [[str(ds[v].values[i]) for v in f.verdicts if v in ds] for i in range(n)]
    verdicts = [next((v for v in o if v not in ("pass", "n/a")), "pass") for o in outcome]
    err = ds["cell_error"] if "cell_error" in ds else None
    errs = ["; ".join(sorted({str(e) for e in np.ravel(err.isel({f.dim: i}).values if f.dim in err.dims else err.values)
                              if str(e)})) if err is not None else "" for i in range(n)]
    bad = [i for i in range(n) if verdicts[i] != "pass" or errs[i]]
    if not bad:
        doc.text("All settings pass; no task raised an error.", size=SMALL, weight="bold")
        return
    reasons = f.reasons or tuple(v + "_reason" for v in f.verdicts)
    reason = lambda i: "; ".join(str(_at(ds, r, f.dim, i)) for r in reasons  # noqa: E731
                                 if r in ds and str(_at(ds, r, f.dim, i)))
    doc.heading("Failures and task errors")
    doc.table(["setting", "verdict: why", "task errors (variable cell_error)"],
              [[str(ds[f.dim].values[i]), f"{verdicts[i]}: {reason(i) or '—'}", errs[i] or "—"] for i in bad],
              [1.0, 4.0, 4.0], colors={(r, 0): COLORS.get(verdicts[i], COLORS["fail"]) for r, i in enumerate(bad)})


# ------------------------------------------------------------------------------------------------
# figure pages

def _curve(ds: xr.Dataset, spec, facet: str | None, i: int | None, x: np.ndarray) -> np.ndarray:
    """A curve over ``x``: a variable, or ``a0 + a1/x + ...`` from scalar coefficients."""
    if isinstance(spec, str):
        return np.asarray(_at(ds, spec, facet, i), dtype=float) * np.ones_like(x)
    coef = [float(_at(ds, c, facet, i)) for c in spec]
    return sum(c / x ** j for j, c in enumerate(coef))


def panel_title(ax: Axes, text: str) -> None:
    """A panel title that fits the panel's width: one line in type down to 7.5 pt, else two lines."""
    width = ax.get_position().width * ax.figure.get_figwidth()
    for size in (9.0, 8.5, 8.0, 7.5):
        lines = wrap_text(text, width, size)
        if len(lines) == 1:
            break
    while len(lines) > 2 and size > 6.5:
        size -= 0.5
        lines = wrap_text(text, width, size)
    ax.set_title("\n".join(lines[:2]), fontsize=size)


def _no_data(ax: Axes, ds: xr.Dataset, facet: str | None, i: int | None, reason: str) -> None:
    why = "no estimates"
    if facet is not None:
        reason = str(_at(ds, reason, facet, i)) if reason in ds else ""
        err = str(_at(ds, "cell_error", facet, i)) if "cell_error" in ds else ""
        why = f"no estimates: {reason or 'failed'}. {err}".strip()
    ax.text(0.5, 0.5, "\n".join(wrap_text(why, 2.4, SMALL)), transform=ax.transAxes, ha="center", va="center",
            fontsize=SMALL, color=COLORS["fit"])
    ax.set(xticks=[], yticks=[])


def draw_panel(ax: Axes, ds: xr.Dataset, p: Panel, facet: str | None = None, i: int | None = None) -> set:
    """Draw one panel; return the legend entries it used, as ``(role, label)`` pairs."""
    p = dataclasses.replace(p, **{f: f"{v}_mcse" for f, v in (("band", p.var), ("hline_band", p.hline))
                                  if v and getattr(p, f) is None and f"{v}_mcse" in ds.variables})
    y = np.asarray(_at(ds, p.var, facet, i), dtype=float)
    used: set = set()
    title = fill(p.title, ds, facet, i)
    if not np.isfinite(y).any():
        _no_data(ax, ds, facet, i, p.reason)
        panel_title(ax, title)
        return used
    if p.kind in ("qq", "forest"):
        return (_qq_panel if p.kind == "qq" else _forest_panel)(ax, ds, p, facet, i, title, y)
    x = ds[p.x].values.astype(float)
    xmin = float(_at(ds, p.fit_range, facet, i)) if p.fit_range else -math.inf
    sel = x >= xmin if math.isfinite(xmin) else np.ones(x.shape, bool) if not p.fit_range else np.zeros(x.shape, bool)
    shown = sel if p.zoom and sel.any() else np.ones(x.shape, bool)
    ylabel = p.ylabel or label(ds, p.var)
    if p.series:
        return _series_panel(ax, ds, p, facet, i, title)
    if p.kind == "residual":
        worst = residual_panel(ax, x, y, sel)
        panel_title(ax, title + (f"; largest off scale {worst}" if worst else ""))
        ax.set(xlabel=label(ds, p.x), ylabel=ylabel)
        return {("residual", "")}
    se = np.asarray(_at(ds, p.band, facet, i), dtype=float) * np.ones_like(y) if p.band else np.zeros_like(y)
    v = np.abs(y) if p.absolute else y
    if p.fit_range and sel.any() and not p.zoom:
        ax.axvspan(x[sel][0] / 1.25, x[-1] * 1.25, color=COLORS["span"], zorder=0)
        used.add(("span", f"fit range {p.x} ≥ {p.x}_min"))
    if p.slopes and sel.any():
        j = int(np.argmax(sel))
        for s, ls in zip(p.slopes, ("--", ":", "-.")):
            ax.plot(x, v[j] * (x / x[j]) ** s, ls, color=COLORS["ref"], lw=0.9)
            used.add((f"slope{ls}", f"reference slope {fin(s, 'g')}"))
    if p.hline:
        c, cse = float(_at(ds, p.hline, facet, i)), float(_at(ds, p.hline_band, facet, i)) if p.hline_band else 0.0
        if math.isfinite(c):
            if cse > 0:
                ax.axhspan(c - 2 * cse, c + 2 * cse, color=COLORS["band"], alpha=0.25, lw=0)
            ax.axhline(c, color=COLORS["band"], lw=0.8)
            used.add(("hline", p.hline_label))
    for spec, role, lab in ((p.fit, "fit", p.fit_label), (p.reference, "ref", p.reference_label)):
        if spec is None:
            continue
        if isinstance(spec, str):  # a variable over x: the fit over its range, the reference where shown
            m = sel if role == "fit" else shown
            xx, cv = x[m], _curve(ds, spec, facet, i, x)[m]
        elif sel.any():  # coefficients of a0 + a1/x + ...: an expansion, drawn over the fit range
            xx = np.geomspace(x[sel][0], x[-1], 200)
            cv, role = _curve(ds, spec, facet, i, xx), role + "c"
        else:
            continue
        if role == "ref" and p.reference_band:
            rb = 2 * np.asarray(_at(ds, p.reference_band, facet, i), dtype=float)[m]
            lo_r = np.maximum(cv - rb, 1e-3 * cv) if p.logy else cv - rb
            ax.fill_between(xx, lo_r, cv + rb, color="0.8", lw=0, zorder=1)
            used.add(("refband", f"{lab} ± 2 MCSE"))
        if np.isfinite(cv).any():
            ls, color, lw = _STYLE[role]
            ax.plot(xx, np.abs(cv) if p.absolute else cv, ls, color=color, lw=lw, zorder=3)
            used.add((role, lab))
    lv = _level(ax, ds, p, facet, i, used)
    for n, name in enumerate(p.marks):
        xm = float(_at(ds, name, facet, i))
        if math.isfinite(xm):
            ax.axvline(xm, ls=_MARKS[n % 3], color=COLORS["exact"], lw=0.9, zorder=2)
            used.add((f"mark{n % 3}", p.mark_labels[n] if n < len(p.mark_labels) else label(ds, name)))
    for n, name in enumerate(p.also):
        w = np.asarray(_at(ds, name, facet, i), dtype=float)
        ax.plot(x[shown], w[shown], "s-", color=_ALSO[n % 3], ms=3, mfc="white", lw=0.8)
        used.add((f"also{n}", p.also_labels[n] if n < len(p.also_labels) else label(ds, name)))
    ok = shown & np.isfinite(v) & ((v > 0) if p.logy else True)
    lo, hi = v - 2 * se, v + 2 * se
    if p.logy:
        lo = np.maximum(lo, v / 1e3)
    color = COLORS["data"]
    if p.band:
        ax.fill_between(x[ok], lo[ok], hi[ok], color=color, alpha=0.18, lw=0, zorder=4)
    neg = y < 0 if p.absolute else np.zeros(y.shape, bool)
    for m, mfc in ((ok & ~neg, color), (ok & neg, "white")):
        if m.any():
            ax.errorbar(x[m], v[m], yerr=[v[m] - lo[m], hi[m] - v[m]] if p.band else None, fmt="o", ms=3.5,
                        color=color, mfc=mfc, lw=0.9, zorder=5)
    used.add(("data", p.label or (f"{p.var} ± 2 MCSE" if p.band else p.var)))
    if neg.any():
        used.add(("neg", f"{p.var} < 0 (|{p.var}| shown)"))
    if p.logx or p.logy:  # a log value axis has a log k axis too
        _log_axes(ax, x, *((v[ok], *(np.asarray(_at(ds, n, facet, i), dtype=float)[shown] for n in p.also))
                           if p.logy else ()))
        ax.set_xlim(x[shown][0] / 1.4, x[shown][-1] * 1.4)
    if p.symlog and not p.logy:
        ax.set_yscale("symlog", linthresh=float(np.nanmin(np.abs(v[ok][v[ok] != 0]), initial=1.0)))
    elif not p.logy:
        yy = np.concatenate([lo[ok], hi[ok]] + [np.asarray(_at(ds, n, facet, i), dtype=float)[shown] for n in p.also]
                            + ([np.array([c - 2 * cse, c + 2 * cse])] if p.hline and math.isfinite(c) else [])
                            + [np.array([lv if lv is not None else np.nan])])
        yy = yy[np.isfinite(yy)]
        if yy.size:
            pad = 0.08 * (yy.max() - yy.min()) + 1e-9 * max(1.0, abs(yy.max()))
            ax.set_ylim(yy.min() - pad, yy.max() + pad)
        ax.ticklabel_format(axis="y", useOffset=False)
    if p.ylim:
        ax.set_ylim(*p.ylim)
    panel_title(ax, title)
    ax.set(xlabel=label(ds, p.x), ylabel=ylabel)
    return used


def _level(ax: Axes, ds: xr.Dataset, p: Panel, facet: str | None, i: int | None, used: set) -> float | None:
    lv = float(_at(ds, p.level, facet, i)) if isinstance(p.level, str) else p.level
    if lv is not None and math.isfinite(lv):
        ax.axhline(lv, color=COLORS["fit"], ls="--", lw=0.9)
        used.add(("level", p.level_label or f"{lv:g}"))
    return lv


def _qq_panel(ax: Axes, ds: xr.Dataset, p: Panel, facet: str | None, i: int | None, title: str, y) -> set:
    """The p-values ``y`` on the −log10 scale against uniform quantiles i/(n+1), with the pointwise 95% band
    of a uniform sample (Beta(i, n+1−i)); p = 0 and values far beyond the uniform range are drawn at the top."""
    pv = np.sort(y[np.isfinite(y)])
    n, alpha = pv.size, float(_at(ds, p.level, facet, i)) if isinstance(p.level, str) else float(p.level or 0.05)
    alpha = alpha if math.isfinite(alpha) and alpha > 0 else 0.05
    q = np.arange(1, n + 1)
    expected = -np.log10(q / (n + 1))
    ax.fill_between(expected, -np.log10(stats.beta.ppf(0.975, q, n + 1 - q)),
                    -np.log10(stats.beta.ppf(0.025, q, n + 1 - q)), color=COLORS["span"], lw=0)
    obs = -np.log10(np.maximum(pv, np.finfo(float).tiny))
    right = max(float(expected.max(initial=0.0)), -np.log10(alpha)) * 1.15
    top = max(right, min(float(obs.max(initial=0.0)) * 1.05, 3 * right))
    ax.plot([0, right], [0, right], color=COLORS["ref"], lw=0.8)
    ax.axhline(-np.log10(alpha), color=COLORS["fit"], lw=0.8, ls="--")
    ax.plot(expected, np.minimum(obs, top), "o", ms=2.5, color=COLORS["data"])
    ax.set(xlim=(0, right), ylim=(0, top), xlabel="expected −log10 p (uniform)", ylabel="observed −log10 p")
    panel_title(ax, title)
    return {("data", p.label or "p-values"), ("uniform", "uniform quantiles"), ("qqband", "95% band of a uniform sample"),
            ("level", p.level_label or "rejection threshold α")}


def _forest_panel(ax: Axes, ds: xr.Dataset, p: Panel, facet: str | None, i: int | None, title: str, y) -> set:
    """One row per value of ``p.x``: the estimate ± 2 MCSE, the reference value (a cross), ``p.level`` (a line);
    the row labels on the first column of the page only, as the rows are shared."""
    names, used = [str(v) for v in ds[p.x].values], {("data", p.label or "estimate ± 2 MCSE")}
    pos = np.arange(len(names))[::-1]
    se = np.asarray(_at(ds, p.band, facet, i), dtype=float) if p.band else np.zeros_like(y)
    if p.level is not None:
        ax.axvline(float(p.level), color=COLORS["ref"], lw=1.0)
        used.add(("zero", p.level_label or f"{p.level:g}"))
    ax.errorbar(y, pos, xerr=2 * se, fmt="o", color=COLORS["data"], ms=5, zorder=4)
    if p.reference:
        ax.plot(np.asarray(_at(ds, p.reference, facet, i), dtype=float), pos, "x", color=COLORS["exact"], ms=8,
                mew=1.5, zorder=5)
        used.add(("cross", p.reference_label))
    first = ax.get_subplotspec() is None or ax.get_subplotspec().is_first_col()
    ax.set(yticks=pos, yticklabels=names if first else [""] * len(names), ylim=(-0.7, len(names) - 0.3),
           xlabel=p.ylabel or label(ds, p.var))
    ax.grid(axis="y", alpha=0)
    panel_title(ax, title + ("" if first else " (rows as on the left)"))
    return used


def _series_panel(ax: Axes, ds: xr.Dataset, p: Panel, facet: str | None, i: int | None, title: str) -> set:
    """One curve per value of ``p.series``, each with ±2 MCSE bars, shaded light (first) to dark (last)."""
    x = ds[p.x].values.astype(float)
    sub = lambda name: (ds[name].isel({facet: i}) if facet else ds[name]).transpose(p.series, p.x).values  # noqa
    y = sub(p.var).astype(float)
    se = sub(p.band).astype(float) if p.band else np.zeros_like(y)
    values, used, shown = ds[p.series].values, set(), []
    for j, v in enumerate(values):
        if not np.isfinite(y[j]).any():  # a value the variable does not hold
            continue
        color = to_hex(colormaps["viridis"](0.15 + 0.7 * j / max(len(values) - 1, 1)))
        ok = np.isfinite(y[j]) & ((y[j] > 0) if p.logy else True)
        lo = np.minimum(2 * se[j][ok], 0.999 * y[j][ok]) if p.logy else 2 * se[j][ok]
        ax.errorbar(x[ok], y[j][ok], yerr=[lo, 2 * se[j][ok]] if p.band else None, fmt="o-", ms=3, lw=1,
                    color=color, zorder=4)
        shown.append(y[j][ok])
        h = float((ds[p.series_hline].isel({facet: i}) if facet else ds[p.series_hline]).transpose(p.series, ...)
                  .values[j]) if p.series_hline else math.nan
        if math.isfinite(h) and (h > 0 or not p.logy):
            ax.axhline(h, color=color, ls="--", lw=1)
            shown.append(np.array([h]))
            used.add(("serieshline", label(ds, p.series_hline)))
        used.add((f"series|{j:03d}|{color}", f"{p.series} = {v}" if isinstance(v, str) else f"{p.series} = {fin(v, 'g')}"))
    _level(ax, ds, p, facet, i, used)
    if p.logx or p.logy:
        _log_axes(ax, x, *(shown if p.logy else ()))
    if p.ylim:
        ax.set_ylim(*p.ylim)
    panel_title(ax, title)
    ax.set(xlabel=label(ds, p.x), ylabel=p.ylabel or label(ds, p.var))
    return used


_MARKS = ("--", ":", "-.")
_STYLE = {"fit": ("-", COLORS["fit"], 2.2), "fitc": ("-", COLORS["fit"], 1.3), "ref": ("-", COLORS["exact"], 0.8),
          "refc": ("--", COLORS["exact"], 0.9)}

_ALSO = (COLORS["plain"], COLORS["ref"], COLORS["band"])
_PATCHES = {"hline": dict(color=COLORS["band"], alpha=0.5), "span": dict(color=COLORS["span"]), "refband": dict(color="0.8"),
            "qqband": dict(color=COLORS["span"])}
_LINES = {"data": dict(marker="o", ls="", color=COLORS["data"]), "level": dict(ls="--", color=COLORS["fit"], lw=0.9),
          "uniform": dict(color=COLORS["ref"], lw=0.8), "zero": dict(color=COLORS["ref"]),
          "cross": dict(marker="x", ls="", color=COLORS["exact"], mew=1.5), "serieshline": dict(ls="--", color="0.3"),
          "neg": dict(marker="o", ls="", mfc="white", color=COLORS["data"]),
          "r_in": dict(marker="o", ls="", color=COLORS["data"]),
          "r_out": dict(marker="o", ls="", mfc="white", color="0.55"), "r_off": dict(marker="^", ls="", color="0.55"),
          "r_2": dict(color=COLORS["ref"], ls="--"), "r_3": dict(color=COLORS["ref"], ls=":"),
          **{role: dict(ls=ls, color=c, lw=lw) for role, (ls, c, lw) in _STYLE.items()}}


_RESIDUAL_KEY = (("r_in", "in the fit (k ≥ k_min)"), ("r_out", "outside the fit (k < k_min)"), ("r_off", "off scale"),
                 ("r_2", "±2"), ("r_3", "±3"))


def _handle(role: str, lab: str):
    """The legend entry of a role recorded by :func:`draw_panel`."""
    if role in _PATCHES:
        return Patch(label=lab, **_PATCHES[role])
    kw = (dict(marker="o", color=role.split("|")[2]) if role.startswith("series|") else
          dict(marker="s", mfc="white", color=_ALSO[int(role[4:]) % 3]) if role.startswith("also") else
          dict(color=COLORS["ref"], ls=role[5:]) if role.startswith("slope") else
          dict(color=COLORS["exact"], ls=_MARKS[int(role[4:])], lw=0.9) if role.startswith("mark") else _LINES[role])
    return Line2D([], [], label=lab, **kw)


def _finish(doc: ReportDocument, fig, ly: float, used: dict) -> None:
    if any(r == "residual" for r, _ in used):  # the key of residual_panel after the other panels' entries
        used = {k: None for k in (*(k for k in used if k[0] not in ("residual", "data")), *_RESIDUAL_KEY)}
    _legend(fig, ly, [_handle(r, lab) for r, lab in used])
    doc.save(fig)


def _figure_pages(doc: ReportDocument, ds: xr.Dataset, page: FigurePage, study=None) -> None:
    key = [RESIDUAL_KEY] if any(p.kind == "residual" for p in page.panels) else []  # what a residual page's marks mean
    head = dict(caption=" ".join([fill(page.caption, ds)] + key), subtitle=fill(page.subtitle, ds))
    for title, nrows, ncols, cells in _layouts(ds, page):
        fig, axes, ly = doc.figure(title, nrows, ncols, **head)
        used: dict = {}
        for r, c, sub, panel, facet, i in cells:
            for key in sorted(draw_panel(axes[r, c], sub, panel, facet, i)):
                used.setdefault(key, None)
        for ax in set(axes.ravel()) - {axes[r, c] for r, c, *_ in cells}:
            ax.set_visible(False)
        _finish(doc, fig, ly, used)


def _layouts(ds: xr.Dataset, page: FigurePage):
    """Each page of a :class:`FigurePage`: title, grid and cells ``(row, column, dataset, panel, facet, index)``."""
    title, panels, facet = fill(page.title, ds), page.panels, page.facet
    if isinstance(facet, tuple):  # a grid of one panel over two dimensions
        (rdim, cdim), (nr, nc) = facet, (ds.sizes[d] for d in facet)
        yield title, nr, nc, [(r, c, ds.isel({rdim: r}), panels[0], cdim, c) for r in range(nr) for c in range(nc)]
    elif isinstance(page.per_page, tuple):  # the first panel once per facet value, pages of a (rows, columns) grid
        (rows, cols), n = page.per_page, ds.sizes[facet]
        paged = n > rows * cols  # then every page of the figure has the full grid: panels of one size
        nc = cols if paged else min(cols, max(n, 3))
        for start in range(0, n, rows * cols):
            more = f" ({start // (rows * cols) + 1}/{-(-n // (rows * cols))})" if paged else ""
            idx = range(start, min(n, start + rows * cols))
            yield title + more, rows if paged else -(-n // nc), nc, [(j // nc, j % nc, ds, panels[0], facet, i)
                                                                     for j, i in enumerate(idx)]
    elif facet is None:  # the panels in rows of at most per_page
        rows = -(-len(panels) // page.per_page)
        nc = -(-len(panels) // rows)
        yield title, rows, nc, [(n // nc, n % nc, ds, panels[n], None, None)
                                for c in range(nc) for n in range(c, len(panels), nc)]
    else:  # a column per facet value, per_page a page; a page's last facets keep the width of the others
        n = ds.sizes[facet]
        for start in range(0, n, page.per_page):
            idx = range(start, min(n, start + page.per_page))
            yield title, len(panels), min(page.per_page, n), [(r, c, ds, p, facet, i) for c, i in enumerate(idx)
                                                              for r, p in enumerate(panels)]
