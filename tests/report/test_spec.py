"""The declarative report vocabulary (simkit.report.spec) and the flow of ReportDocument, on small
synthetic datasets; and every study's committed dataset in data/ renders.

Deterministic tests: no false-failure rate applies.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from simkit.report import document, spec
from simkit.report.spec import Failures, FigurePage, Panel, Table, Text, TitlePage, fill, render

pytestmark = pytest.mark.deterministic(reason="layout and formatting of fixed inputs; no tolerance on randomness")

DATA = Path(__file__).resolve().parents[2] / "data"


def synthetic() -> xr.Dataset:
    k = 2.0 ** np.arange(8)
    y = np.vstack([3.0 / k, 5.0 / k])
    ds = xr.Dataset(coords={"setting": ["a", "b"], "k": k})
    ds["k"].attrs = {"long_name": "number of negatives k", "units": "1"}
    ds["y"] = (("setting", "k"), y, {"long_name": "the gap y", "units": "1"})
    ds["y_mcse"] = (("setting", "k"), 0.1 * y, {"long_name": "MCSE of y", "units": "1"})
    ds["t"] = (("setting", "k"), y, {"long_name": "time", "units": "s"})
    ds["c"] = (("setting",), [3.0, 5.0], {"long_name": "constant", "units": "1"})
    ds["c_mcse"] = (("setting",), [0.0, 0.25], {"long_name": "MCSE of c", "units": "1"})
    ds["k_min"] = (("setting",), [4.0, 4.0])
    ds["verdict"] = (("setting",), ["pass", "fail"])
    ds["verdict_reason"] = (("setting",), ["", "slope interval excludes -1"])
    return ds


def _axes():
    fig = Figure(figsize=(4, 3))
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def test_panel_draws_the_mcse_band():
    """The band is ``y_mcse``, named or by default. Positive control: no band without an MCSE variable."""
    ds = synthetic()
    y = ds["y"].values[1]
    for panel in (Panel("y", band="y_mcse"), Panel("y")):
        ax = _axes()
        spec.draw_panel(ax, ds, panel, "setting", 1)
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(bands) == 1
        verts = bands[0].get_paths()[0].vertices
        # the band spans y ± 2 MCSE at every k: from 0.8 y to 1.2 y
        assert np.isclose(verts[:, 1].max(), 1.2 * y.max()) and np.isclose(verts[:, 1].min(), 0.8 * y.min())
    ax = _axes()
    spec.draw_panel(ax, ds.drop_vars("y_mcse"), Panel("y"), "setting", 1)
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]


def test_axis_labels_come_from_long_name_and_units():
    ds = synthetic()
    ax = _axes()
    spec.draw_panel(ax, ds, Panel("t", logy=True), "setting", 0)
    assert ax.get_ylabel() == "time (s)" and ax.get_xlabel() == "number of negatives k"
    ax = _axes()
    spec.draw_panel(ax, ds, Panel("y"), "setting", 0)
    assert ax.get_ylabel() == "the gap y"  # units "1" are not printed


def test_reference_fit_and_fit_range():
    ds = synthetic()
    ax = _axes()
    used = spec.draw_panel(ax, ds, Panel("y", reference=("c",), fit="y", fit_range="k_min", hline="c",
                                         hline_band="c_mcse", slopes=(-1.0,)), "setting", 1)
    roles = {r for r, _ in used}
    assert {"refc", "fit", "span", "hline", "slope--", "data"} <= roles
    fit = [line for line in ax.lines if line.get_color() == document.COLORS["fit"]]
    assert fit and np.min(fit[0].get_xdata()) == 4.0  # the fit is drawn over k >= k_min only


def test_failed_facet_says_why():
    ds = synthetic()
    ds["y"][1] = np.nan
    ax = _axes()
    spec.draw_panel(ax, ds, Panel("y", band="y_mcse"), "setting", 1)
    assert any("slope interval excludes -1" in t.get_text() for t in ax.texts)


def test_title_templates_and_exact_values():
    ds = synthetic()
    assert fill("{facet}: c {c±c_mcse}", ds, "setting", 1) == "b: c 5.00 ± 0.25"
    assert fill("{facet}: c {c±c_mcse}", ds, "setting", 0) == "a: c 3 (exact)"  # MCSE 0: exact, not "± 0"
    assert fill("{k_min:.1f}", ds, "setting", 0) == "4.0"
    assert fill("{missing}", ds, "setting", 0) == "n/a"


def test_long_title_is_wrapped_not_clipped():
    ds = synthetic()
    ax = _axes()
    long = "a: " + "a rather long panel title " * 4
    spec.draw_panel(ax, ds, Panel("y", title=long), "setting", 0)
    lines = ax.get_title().split("\n")
    width = ax.get_position().width * ax.figure.get_figwidth()
    assert len(lines) == 2
    assert all(document._width_in(line, ax.title.get_fontsize()) <= width for line in lines)


def _build(tmp_path, items, ds=None) -> int:
    return document.write_report(tmp_path / "r.pdf", lambda doc: render(doc, ds if ds is not None else synthetic(),
                                                                         items))


def n_pages(path: Path) -> int:
    return len(re.findall(rb"/Type\s*/Page\b", path.read_bytes()))


def test_table_and_failures(tmp_path, monkeypatch):
    seen = []
    original = document.ReportDocument.table
    monkeypatch.setattr(document.ReportDocument, "table",
                        lambda self, h, rows, *a, **k: (seen.append((h, rows)), original(self, h, rows, *a, **k)))
    _build(tmp_path, [Table(("y", "c", ("k_min", "{k_min}"))), Failures()],
           synthetic().isel(k=0))
    header, rows = seen[0]
    assert header == ["the gap y", "constant", "k_min", "verdict"]
    assert rows[1] == ["5.00 ± 0.50", "5.00 ± 0.25", "4", "FAIL"]
    assert seen[1][1] == [["b", "fail: slope interval excludes -1", "—"]]
    seen.clear()  # a bare field as template: its MCSE when it has one, a format, another error, text as text
    _build(tmp_path, [Table((("Y", "y"), ("C", "c:.1f"), ("C ± y", "c±y_mcse"), ("k", "k_min"), ("n", "n/a")))],
           synthetic().isel(k=0))
    assert seen[0][0] == ["Y", "C", "C ± y", "k", "n", "verdict"]
    assert seen[0][1] == [["3.00 ± 0.30", "3.0", "3.00 ± 0.30", "4", "n/a", "PASS"],
                          ["5.00 ± 0.50", "5.0", "5.00 ± 0.50", "4", "n/a", "FAIL"]]


def test_lone_sentence_joins_the_page_before(tmp_path, monkeypatch):
    """One sentence more than a page holds is not left alone on a second page: the flow is set
    slightly smaller onto one page. Positive control: without the smaller sizes it takes two."""
    lines = lambda n: [TitlePage(texts=tuple(f"Sentence {j} of the flow." for j in range(n)))]  # noqa: E731
    with monkeypatch.context() as m:  # without the merge: the smallest flow that spills onto a second page
        m.setattr(document.ReportDocument, "SCALES", (1.0,))
        n = 20
        while _build(tmp_path, lines(n)) == 1:
            n += 1
        assert _build(tmp_path, lines(n)) == 2  # its last sentence alone on page 2
    assert _build(tmp_path, lines(n)) == 1  # with it: one page
    assert _build(tmp_path, lines(2 * n)) >= 2  # a flow of two full pages is not squeezed onto one


def test_figure_page_facets(tmp_path):
    ds = xr.concat([synthetic()] * 2, "setting").assign_coords(setting=list("abcd"))
    page = FigurePage("y against k", (Panel("y", band="y_mcse"), Panel("t")), caption="caption", per_page=3)
    assert _build(tmp_path, [page], ds) == 2  # four settings, three a page


#: the reports that take longest to draw (5–20 s each on 2 cores) run with the slow tests
_SLOW = {"asymmetry", "continuity", "generalisation", "search_ce", "temperature"}
STUDIES = [pytest.param(p.stem, marks=pytest.mark.slow) if p.stem in _SLOW else p.stem
           for p in sorted(DATA.glob("*.nc")) if p.stem not in ("claims", "validation", "validation_full")]


@pytest.mark.parametrize("name", STUDIES)
def test_committed_dataset_renders(tmp_path, name):
    from simkit.runner import get_study, read_dataset
    ds = read_dataset(DATA / f"{name}.nc")
    study = get_study(ds.attrs["study"])
    spec.UNRESOLVED.clear()
    pages = study.report(ds, tmp_path / f"{name}.pdf")
    assert pages >= 2 and n_pages(tmp_path / f"{name}.pdf") == pages
    assert not spec.UNRESOLVED  # every {field} of the study's prose and declarations names a value of its dataset


def _heading_pages(tmp_path, monkeypatch, m: int) -> tuple[int, int]:
    """Page of a heading and page of the first row of the table under it, after ``m`` sentences."""
    seen: dict = {}
    heading, rule = document.ReportDocument._heading, document.ReportDocument._rule

    def _heading(self, *args):
        heading(self, *args)
        if not self._dry:
            seen["heading"] = len(self._fills)

    def _rule(self):
        rule(self)
        if not self._dry and "heading" in seen:
            seen.setdefault("table", len(self._fills))

    monkeypatch.setattr(document.ReportDocument, "_heading", _heading)
    monkeypatch.setattr(document.ReportDocument, "_rule", _rule)
    table = Table((("setting", "{facet}"), ("y", "{c±c_mcse}\nsecond line\nthird line")), heading="A heading",
                  verdict=None)
    ds = xr.concat([synthetic()] * 8, "setting").assign_coords(setting=[f"s{j}" for j in range(16)])
    _build(tmp_path, [TitlePage(texts=tuple(f"Sentence {j}." for j in range(m))), table], ds)  # a long table:
    return seen["heading"], seen["table"]  # its second page is well filled and nothing is scaled to fit


def test_heading_stays_with_its_table(tmp_path, monkeypatch):
    """Wherever the page ends, a heading is never the last line of a page with its table on the next.
    Positive control: without keeping the table's first rows, some length orphans the heading."""
    pages = [_heading_pages(tmp_path, monkeypatch, m) for m in range(18, 30)]
    assert all(h == t for h, t in pages)
    monkeypatch.setattr(document.ReportDocument, "_first_height", lambda self, *a: 0.0)
    orphaned = [_heading_pages(tmp_path, monkeypatch, m) for m in range(18, 30)]
    assert any(h != t for h, t in orphaned)


def test_claim_table_from_the_study_checks(tmp_path, monkeypatch):
    seen = []
    original = document.ReportDocument.table
    monkeypatch.setattr(document.ReportDocument, "table",
                        lambda self, h, rows, *a, **k: (seen.append((h, rows)), original(self, h, rows, *a, **k)))

    class Study:
        def claim_rows(self, ds):
            return [{"claim": "C1", "statistic": "slope", "estimate": -1.0008, "estimate_mcse": 0.0004,
                     "false_fail_rate": 0.005, "verdict": "pass", "detail": "3 of 3 settings pass"},
                    {"claim": "C4", "statistic": "bound", "estimate": 0.5, "estimate_mcse": 0.0,
                     "false_fail_rate": float("nan"), "verdict": "fail", "detail": "violated"}]

    document.write_report(tmp_path / "r.pdf", lambda doc: render(doc, synthetic(), [spec.ClaimTable()], study=Study()))
    header, rows = seen[0]
    assert header[:5] == ["claim", "statistic", "estimate ± MCSE", "false-fail rate", "verdict"]
    assert rows == [["C1", "slope", "−1.00080 ± 0.00040", "0.005", "PASS", "3 of 3 settings pass"],
                    ["C4", "bound", "0.5 (exact)", "deterministic", "FAIL", "violated"]]


def test_series_draws_one_curve_per_value():
    ds = synthetic()
    ds = ds.assign_coords(eps=[0.1, 0.5, 1.0])
    ds["r"] = (("setting", "eps", "k"), np.arange(2 * 3 * 8, dtype=float).reshape(2, 3, 8) + 1.0)
    ds["r_mcse"] = 0.1 * ds["r"]
    ax = _axes()
    used = spec.draw_panel(ax, ds, Panel("r", band="r_mcse", series="eps", level=1.0, level_label="one"), "setting", 1)
    assert sorted(lab for _, lab in used) == ["eps = 0.1", "eps = 0.5", "eps = 1", "one"]
    curves = [line for line in ax.lines if len(line.get_xdata()) == 8]
    assert len(curves) == 3
    assert np.array_equal(curves[2].get_ydata(), ds["r"].values[1, 2])  # the facet's own values, in series order


def test_several_verdict_columns_each_coloured(tmp_path, monkeypatch):
    """A tuple of verdict variables gives one column each, headed by its long_name and coloured by outcome.
    Positive control: a single verdict name gives the one 'verdict' column."""
    seen = []
    original = document.ReportDocument.table
    monkeypatch.setattr(document.ReportDocument, "table", lambda self, h, rows, *a, **k: (
        seen.append((h, rows, k.get("colors"))), original(self, h, rows, *a, **k)))
    ds = synthetic().isel(k=0)
    ds["second"] = (("setting",), ["fail", "pass"], {"long_name": "check two"})
    _build(tmp_path, [Table((("c", "{c}"),), verdict=("verdict", "second")), Table((("c", "{c}"),))], ds)
    (h2, rows2, col2), (h1, rows1, _) = seen
    assert h2 == ["c", "verdict", "check two"] and rows2 == [["3", "PASS", "FAIL"], ["5", "FAIL", "PASS"]]
    assert col2[(0, 1)] == col2[(1, 2)] == document.COLORS["pass"] and col2[(0, 2)] == document.COLORS["fail"]
    assert h1 == ["c", "verdict"] and rows1[1] == ["5", "FAIL"]


def test_gather_and_stack():
    """gather puts prefixed scalars on one dimension (NaN where one is missing); stack puts several
    variables and their MCSE on a series dimension, values unchanged."""
    ds = xr.Dataset({"p_b": 1.5, "p_b_se": 0.1, "q_b": -2.0})
    rows = spec.gather(ds, {"first": "p_", "second": "q_"}, ("b", "b_se"))
    assert list(rows["row"].values) == ["first", "second"]
    assert rows["b"].values.tolist() == [1.5, -2.0] and rows["b_se"].values[0] == 0.1
    assert np.isnan(rows["b_se"].values[1])
    s = spec.stack(synthetic(), {"gap": "y", "time": "t"}, "what", "both", {"long_name": "both", "units": "1"})
    assert s["both"].dims[0] == "what" and list(s["what"].values) == ["gap", "time"]
    np.testing.assert_array_equal(s["both"].sel(what="time").values, synthetic()["t"].values)
    np.testing.assert_array_equal(s["both_mcse"].sel(what="gap").values, synthetic()["y_mcse"].values)
    assert np.isnan(s["both_mcse"].sel(what="time").values).all()  # t has no MCSE: none invented


def test_fill_leaves_mathematics_and_formats_the_facet():
    """``e^{c}`` and ``R_{c}`` are text, ``{c}`` a field; ``{facet:.2f}`` formats a numeric facet."""
    ds = synthetic()
    assert fill("e^{c} R_{c} {c}", ds, "setting", 1) == "e^{c} R_{c} 5"
    assert fill("k = {facet:.2f}", ds, "k", 2) == "k = 4.00"


def test_level_from_a_variable_and_panels_in_rows(tmp_path, monkeypatch):
    """A level named by a scalar variable is drawn at its value and kept inside the axes; a page of
    five panels without facets lays them out in two rows of three."""
    ds = synthetic().assign(margin=xr.DataArray(9.0))
    ax = _axes()
    spec.draw_panel(ax, ds, Panel("y", band="y_mcse", level="margin", logx=False), "setting", 0)
    assert any(np.allclose(line.get_ydata(), 9.0) for line in ax.get_lines())
    assert ax.get_ylim()[1] > 9.0
    grids = []
    original = document.ReportDocument.figure
    monkeypatch.setattr(document.ReportDocument, "figure",
                        lambda self, t, r, c, **k: (grids.append((r, c)), original(self, t, r, c, **k))[1])
    for n in (5, 3):
        _build(tmp_path, [FigurePage("n", tuple(Panel("y", title=str(j)) for j in range(n)), facet=None)],
               ds.isel(setting=0))
    assert grids == [(2, 3), (1, 3)]


def test_prose_sections_and_unresolved_fields(tmp_path, monkeypatch):
    """``pages/<study>.md``: one paragraph per ``## name``, lines joined, a blank line a new line with its
    indentation; a field that names nothing is recorded. Positive control: a known name is not."""
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "x.md").write_text("# title\n\n## one\nfirst\nline {c}\n\n    indented\n## two\nb\n")
    monkeypatch.setattr(spec, "__file__", str(tmp_path / "spec.py"))
    spec.prose.cache_clear()
    try:
        assert spec.prose("x") == {"one": "first line {c}\n    indented", "two": "b"}
    finally:
        spec.prose.cache_clear()
    ds = synthetic().assign_attrs(alpha=0.01, config='{"block_anchors": 64}')
    spec.UNRESOLVED.clear()
    assert fill("{alpha:g} {block_anchors} {n_k} {c}", ds, "setting", 0) == "0.01 64 8 3"
    assert not spec.UNRESOLVED
    assert fill("{no_such_value}", ds) == "n/a" and spec.UNRESOLVED == {"no_such_value"}


def test_qq_panel_band_and_threshold():
    """The QQ panel puts the i-th smallest p-value at the uniform quantile i/(n+1) on the −log10 scale, with the
    Beta band and the threshold α. Positive control: p-values squeezed towards 0 lie above the band."""
    from scipy import stats as st
    n = 99
    pv = (np.arange(1, n + 1) / (n + 1))[::-1]
    ds = xr.Dataset({"p": (("check", "seed"), np.vstack([pv, pv ** 4])), "alpha": ("check", [0.01, 0.01])},
                    coords={"check": ["a", "b"]})
    for row, above in ((0, False), (1, True)):
        ax = _axes()
        used = spec.draw_panel(ax, ds, Panel("p", kind="qq", level="alpha"), "check", row)
        assert {"data", "uniform", "qqband", "level"} <= {r for r, _ in used}
        pts = [line for line in ax.lines if line.get_marker() == "o"][0]
        x, y = pts.get_xdata(), pts.get_ydata()
        np.testing.assert_allclose(x, -np.log10(np.arange(1, n + 1) / (n + 1)))
        upper = -np.log10(st.beta.ppf(0.025, np.arange(1, n + 1), n + 1 - np.arange(1, n + 1)))
        assert (y > upper + 1e-9).any() == above
        assert any(np.allclose(line.get_ydata(), 2.0) for line in ax.lines)  # −log10 0.01


def test_forest_panel_rows_and_reference():
    """A forest panel: one row per setting (top to bottom in order), estimate ± 2 MCSE, the reference as crosses
    at the same rows, the level as a vertical line."""
    ds = synthetic().isel(k=0)
    ds["c_ref"] = ("setting", [2.5, 5.5])
    ax = _axes()
    used = spec.draw_panel(ax, ds, Panel("c", kind="forest", x="setting", band="c_mcse", reference="c_ref", level=0.0),
                           None, None)
    assert {"data", "cross", "zero"} <= {r for r, _ in used}
    assert dict(zip(ax.get_yticks().tolist(), [t.get_text() for t in ax.get_yticklabels()])) == {1: "a", 0: "b"}
    cross = [line for line in ax.lines if line.get_marker() == "x"][0]
    assert cross.get_xdata().tolist() == [2.5, 5.5] and cross.get_ydata().tolist() == [1, 0]
    assert any(np.allclose(line.get_xdata(), 0.0) for line in ax.lines)


def test_series_hline_in_each_curve_colour_and_grid_pages(tmp_path, monkeypatch):
    """``series_hline`` draws one dashed line per series value, in that curve's colour (none where the value is
    NaN); ``per_page=(rows, columns)`` pages a one-panel figure over the facet."""
    ds = synthetic().assign_coords(eps=[0.1, 0.5])
    ds["r"] = (("setting", "eps", "k"), np.ones((2, 2, 8)) + np.arange(8))
    ds["lim"] = (("setting", "eps"), [[3.0, np.nan], [4.0, 5.0]])
    ax = _axes()
    spec.draw_panel(ax, ds, Panel("r", series="eps", series_hline="lim"), "setting", 0)
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert [float(line.get_ydata()[0]) for line in dashed] == [3.0]
    curve = [line for line in ax.lines if len(line.get_xdata()) == 8][0]
    assert dashed[0].get_color() == curve.get_color()
    grids = []
    original = document.ReportDocument.figure
    monkeypatch.setattr(document.ReportDocument, "figure",
                        lambda self, t, r, c, **k: (grids.append((t, r, c)), original(self, t, r, c, **k))[1])
    many = xr.concat([synthetic()] * 4, "setting").assign_coords(setting=[f"s{j}" for j in range(8)])
    assert _build(tmp_path, [FigurePage("g", (Panel("y"),), per_page=(1, 3))], many) == 3
    assert grids == [("g (1/3)", 1, 3), ("g (2/3)", 1, 3), ("g (3/3)", 1, 3)]


def test_every_prose_section_is_read_by_its_module():
    """Each ``## name`` of ``pages/<study>.md`` is read by ``simkit/report/<study>.py`` (``P["name"]``, or an
    f-string key such as ``P[f"{var}_caption"]``): a section nobody reads is stale text. Positive control: a
    made-up section name matches no key."""
    root = Path(spec.__file__).parent
    for md in sorted((root / "pages").glob("*.md")):
        if md.stem == "common":
            continue
        keys = re.findall(r'P\[f?"([^"]+)"\]', (root / f"{md.stem}.py").read_text())
        pats = [re.compile(re.sub(r"\\\{[^}]*\\\}", r"\\w+", re.escape(k)) + "$") for k in keys]
        assert pats and not any(p.match("no such section") for p in pats)
        unread = [name for name in spec.prose(md.stem) if not any(p.match(name) for p in pats)]
        assert not unread, (md.name, unread)


def test_generic_quantities_of_templates():
    """``level``, ``t_crit`` and ``<coord>_min`` / ``<coord>_max`` resolve without a study computing them;
    expected values from scipy and the coordinate written here. Positive control: without ``alpha`` and on a
    name that is no coordinate they stay unresolved."""
    from scipy import stats as st
    ds = synthetic().assign_coords(block=np.arange(20)).assign_attrs(alpha=0.01)
    assert fill("{level:g} {t_crit:.4f} {k_min} {k_max} {block_max}", ds) == (
        f"0.99 {st.t.isf(0.005, 19):.4f} 1 128 19")
    assert fill("{k_max}", ds.assign_attrs(k_max=64)) == "64"  # a stated value wins
    assert fill("{{k_values}}", ds) == "{1, 2, 4, 8, 16, 32, 64, 128}"  # a coordinate listed
    spec.UNRESOLVED.clear()
    assert fill("{level} {t_crit} {y_max}", synthetic()) == "n/a n/a n/a"
    assert spec.UNRESOLVED == {"level", "t_crit", "y_max"}


def test_sections_require_what_they_draw(tmp_path):
    """A study's sections name the variables its declarations draw (panels, verdict columns) or its
    derivation reads when the dataset lacks them, and write nothing; a complete dataset renders."""
    pages = (TitlePage(then=(Table(("c",), verdict="verdict"),)), FigurePage("y", (Panel("y"),)))
    draw = spec.sections("toy", pages, lambda ds: ds.assign(y=ds["t"] * 1.0) if "t" in ds else ds["t"])
    assert document.write_report(tmp_path / "ok.pdf", lambda doc: draw(doc, synthetic())) == 2
    with pytest.raises(ValueError, match=r"'ds' must be a toy dataset; it lacks 'verdict' \(open"):
        document.write_report(tmp_path / "a.pdf", lambda doc: draw(doc, synthetic().drop_vars("verdict")))
    with pytest.raises(ValueError, match=r"it lacks 't'"):  # read by the derivation
        document.write_report(tmp_path / "b.pdf", lambda doc: draw(doc, synthetic().drop_vars("t")))
    bare = spec.sections("toy", pages)
    with pytest.raises(ValueError, match=r"it lacks 'verdict', 'y'"):
        document.write_report(tmp_path / "c.pdf", lambda doc: bare(doc, synthetic().drop_vars(["y", "verdict"])))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.pdf"]


def test_view_draws_its_items_on_each_dataset(monkeypatch, tmp_path):
    """A :class:`View` draws its items once per dataset its function returns, and not at all for None."""
    texts = []
    monkeypatch.setattr(document.ReportDocument, "text", lambda self, text, **k: texts.append(text))
    each = spec.View(lambda ds: [ds.isel(setting=i) for i in range(ds.sizes["setting"])], (Text("setting {setting}"),))
    _build(tmp_path, [each, spec.View(lambda ds: None, (Text("never"),))])
    assert texts == ["setting a", "setting b"]


def test_study_sections_are_found_by_the_study_name(tmp_path):
    """``study_sections(name)`` draws the ``PAGES`` of ``simkit/report/<name>.py`` after its ``derive``; a
    name without a module (an out-of-tree study) draws nothing. Positive control: a rate_k dataset without
    its verdicts is refused, naming them."""
    nothing = spec.study_sections("no_such_study")
    assert document.write_report(tmp_path / "none.pdf", lambda doc: nothing(doc, None)) == 0
    from simkit.runner import read_dataset
    ds = read_dataset(DATA / "rate_k.nc")
    assert document.write_report(tmp_path / "r.pdf", lambda doc: spec.study_sections("rate_k")(doc, ds)) >= 4
    with pytest.raises(ValueError, match=r"must be a rate_k dataset; it lacks 'verdict'"):
        document.write_report(tmp_path / "bad.pdf",
                              lambda doc: spec.study_sections("rate_k")(doc, ds.drop_vars("verdict")))


def test_residual_page_carries_its_key(tmp_path, monkeypatch):
    """A figure page with residual panels ends its caption with the residual key, once. Positive control: a page
    without residual panels keeps its caption as declared."""
    captions = []
    original = document.ReportDocument.figure
    monkeypatch.setattr(document.ReportDocument, "figure", lambda self, t, r, c, **k: (
        captions.append(k["caption"]), original(self, t, r, c, **k))[1])
    ds = synthetic().assign(resid=lambda d: d["y"] * 0.0)
    _build(tmp_path, [spec.residual_page("r", "Residuals.", ("resid", "rate fit", "k_min")),
                      FigurePage("y", (Panel("y"),), caption="Plain.")], ds)
    assert captions == ["Residuals. " + spec.RESIDUAL_KEY, "Plain."]


def test_cells_stack_two_dimensions():
    """``cells`` gives one row per (setting, k) in order, labelled, both kept as variables, values unchanged."""
    ds = synthetic()
    out = spec.cells(ds, "row", "setting", "k")
    assert out["row"].values.tolist()[:2] == ["a, k = 1", "a, k = 2"] and out["row"].values[9] == "b, k = 2"
    assert out["setting"].values.tolist() == ["a"] * 8 + ["b"] * 8 and out["k"].values[9] == 2.0
    np.testing.assert_array_equal(out["y"].values, ds["y"].values.ravel())
    assert spec.cells(ds, "row", "setting", "k", "κ")["row"].values[0] == "a, κ = 1"
