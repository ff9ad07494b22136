"""PDF reports of simkit studies, read from a saved dataset alone (never from a re-run).

Generic helpers any study can reuse: :class:`ReportDocument` (A4-landscape pages; flowing text and
tables that wrap long text, break between rows and never overlap; figure pages with room reserved
for a legend and a caption), :func:`format_pm` (every number with its MCSE), :func:`provenance_pages`
and :func:`write_report` (atomic write). :func:`rate_k_report` is the report of claim C1
(``studies/rate_k.py``). Figures are plain :class:`matplotlib.figure.Figure` objects on an Agg
canvas, written by ``PdfPages``: no pyplot state is touched.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import matplotlib as mpl
import numpy as np
import xarray as xr
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.textpath import text_to_path
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator
from scipy import stats

from simkit.engine import _atomic_write_bytes

__all__ = ["ReportDocument", "format_pm", "wrap_text", "provenance_pages", "write_report", "rate_k_report"]

#: page size in inches: A4 landscape (prints on US letter without clipping)
PAGE = (11.69, 8.27)
MARGIN = 0.55
BODY, SMALL, TABLE, HEAD, TITLE = 9.0, 7.5, 7.5, 11.5, 16.0
LEADING = 1.3  # line height / font size
STYLE = {"font.size": BODY, "axes.titlesize": 9.5, "axes.labelsize": 8.5, "xtick.labelsize": 7.5,
         "ytick.labelsize": 7.5, "legend.fontsize": 8, "axes.grid": True, "grid.alpha": 0.25,
         "grid.linewidth": 0.5, "axes.spines.top": False, "axes.spines.right": False, "lines.linewidth": 1.2,
         "lines.markersize": 4, "errorbar.capsize": 2, "pdf.compression": 9}
#: colours belong to roles, not settings: the same meaning has the same colour on every page
COLORS = {"data": "#1f77b4", "fit": "#d62728", "ref": "#7f7f7f", "exact": "black", "plain": "#ff7f0e",
          "band": "#2ca02c", "span": "#e8e8e8", "pass": "#d9f2d9", "fail": "#f8d0d0", "error": "#fce5bf",
          "head": "#e4e8f0", "stripe": "#f6f6f6"}
SETTINGS_PER_PAGE = 3
MINUS = "\u2212"


# ------------------------------------------------------------------------------------------------
# text and numbers

@lru_cache(maxsize=8192)
def _width_in(text: str, size: float, family: str = "sans-serif") -> float:
    """Rendered width of one line in inches, from the font metrics (no renderer needed)."""
    w, _, _ = text_to_path.get_text_width_height_descent(text, FontProperties(family=family, size=size),
                                                         ismath=False)
    return w / 72.0


def wrap_text(text: str, width: float, size: float, family: str = "sans-serif") -> list[str]:
    """Greedy word wrap of ``text`` into lines at most ``width`` inches wide at ``size`` points.

    Explicit newlines are kept; a word wider than a line (a hash, a JSON token) is broken between
    characters. A line's width is the sum of its words' and spaces' widths from the font metrics
    (each word measured once), with a 3% safety margin.
    """
    limit, space, out = 0.97 * width, _width_in(" ", size, family), []
    for para in str(text).split("\n"):
        line, used = [], 0.0
        for word in para.split(" "):
            w = _width_in(word, size, family)
            if line and used + space + w <= limit:
                line.append(word)
                used += space + w
                continue
            if line:
                out.append(" ".join(line))
            while w > limit and len(word) > 1:
                lo, hi = 1, len(word) - 1  # bisect for the longest prefix that fits
                while lo < hi:
                    mid = (lo + hi + 1) // 2
                    lo, hi = (mid, hi) if _width_in(word[:mid], size, family) <= limit else (lo, mid - 1)
                cut = lo
                out.append(word[:cut])
                word = word[cut:]
                w = _width_in(word, size, family)
            line, used = [word], w
        out.append(" ".join(line))
    return out


def _num(x: float, dec: int) -> str:
    return f"{x:.{dec}f}".replace("-", MINUS)


def _decimals(se: float, sig: int = 2) -> int:
    return int(min(12, max(0, sig - 1 - math.floor(math.log10(se)))))


def format_pm(value: float, se: float, *, sig: int = 2) -> str:
    """``value ± se``, the error rounded to ``sig`` significant figures and the value to match.

    ``se == 0`` (an exact value) prints ``± 0 (exact)``; a non-finite value prints ``n/a``.
    """
    value, se = float(value), float(se)
    if not math.isfinite(value):
        return "n/a"
    if not math.isfinite(se):
        return f"{value:.4g} ± n/a".replace("-", MINUS)
    if se == 0:
        return f"{value:#.6g} ± 0 (exact)".replace("-", MINUS)
    dec = _decimals(se, sig)
    return f"{_num(value, dec)} ± {_num(se, dec)}"


# ------------------------------------------------------------------------------------------------
# pages

class ReportDocument:
    """The pages of a PDF report: flowing text and tables, and figure pages.

    Text and tables are laid out top-down in inches; a line or table row that would not fit starts
    a new page (a table repeats its header), so nothing overlaps. Every page gets the footer and a
    page number.

    Parameters
    ----------
    pdf : matplotlib.backends.backend_pdf.PdfPages
        The open output.
    footer : str
        Left-hand footer of every page.
    """

    def __init__(self, pdf: PdfPages, footer: str = ""):
        self.pdf, self.footer = pdf, footer
        self.w, self.h = PAGE
        self.width = self.w - 2 * MARGIN
        self.fig: Figure | None = None
        self.y, self.pages = MARGIN, 0

    @staticmethod
    def _figure() -> Figure:
        fig = Figure(figsize=PAGE)
        FigureCanvasAgg(fig)  # an Agg canvas for text metrics and layout
        return fig

    def save(self, fig: Figure) -> None:
        """Add the footer and page number and write ``fig`` as the next page."""
        self.pages += 1
        kw = dict(transform=fig.dpi_scale_trans, fontsize=SMALL, color="0.4", va="bottom")
        fig.text(MARGIN, 0.25, self.footer, ha="left", **kw)
        fig.text(self.w - MARGIN, 0.25, f"page {self.pages}", ha="right", **kw)
        self.pdf.savefig(fig)

    def finish_page(self) -> None:
        """Write the current flowing page, if any."""
        if self.fig is not None:
            self.save(self.fig)
        self.fig = None

    def new_page(self) -> None:
        self.finish_page()
        self.fig, self.y = self._figure(), MARGIN

    def _room(self, height: float) -> None:
        if self.fig is None or self.y + height > self.h - MARGIN - 0.2:
            self.new_page()

    def _put(self, x: float, y: float, s: str, **kw) -> None:
        self.fig.text(x, self.h - y, s, transform=self.fig.dpi_scale_trans, va="top", **kw)

    def _rect(self, x: float, width: float, height: float, color: str, z: float) -> None:
        self.fig.add_artist(Rectangle((x, self.h - self.y - height), width, height, facecolor=color,
                                      edgecolor="none", transform=self.fig.dpi_scale_trans, zorder=z))

    def text(self, text: str, *, size: float = BODY, weight: str = "normal", family: str = "sans-serif",
             color: str = "black", after: float = 0.08, keep: int = 1) -> None:
        """A wrapped paragraph; its first ``keep`` lines stay on one page."""
        lines = wrap_text(text, self.width, size, family)
        lh = size * LEADING / 72
        self._room(lh * min(keep, len(lines)))
        for line in lines:
            self._room(lh)
            self._put(MARGIN, self.y, line, fontsize=size, weight=weight, family=family, color=color)
            self.y += lh
        self.y += after

    def heading(self, text: str, size: float = HEAD) -> None:
        """A bold heading, kept on the page with about three lines of what follows."""
        self._room(size * LEADING / 72 + 0.45)
        self.y += 0.06
        self.text(text, size=size, weight="bold", after=0.05)

    def table(self, header: Sequence[str] | None, rows: Sequence[Sequence[str]], widths: Sequence[float], *,
              size: float = TABLE, colors: dict[tuple[int, int], str] | None = None,
              families: Sequence[str] | None = None, after: float = 0.15) -> None:
        """A table whose cells wrap within their columns; a row never splits across pages.

        Parameters
        ----------
        header : sequence of str or None
            Column headings, repeated after a page break; None draws no header row.
        rows : sequence of sequences of str
            Cell texts (explicit newlines are kept).
        widths : sequence of float
            Relative column widths, scaled to the text width of the page.
        size, colors, families, after
            Font size (pt); background colour of cell ``(row, column)``; font family per column;
            space below the table (inches).
        """
        cols = [w * self.width / float(sum(widths)) for w in widths]
        fam = list(families) if families is not None else ["sans-serif"] * len(cols)
        pad, lh, colors = 0.05, size * LEADING / 72, colors or {}

        def layout(cells):
            wrapped = [wrap_text(c, cw - 2 * pad, size, f) for c, cw, f in zip(cells, cols, fam)]
            return wrapped, max(len(w) for w in wrapped) * lh + 2 * pad

        def draw(wrapped, height, fill, bold=False, cell_fill=None):
            self._rect(MARGIN, self.width, height, fill, 0)
            x = MARGIN
            for j, (lines, cw) in enumerate(zip(wrapped, cols)):
                if cell_fill and j in cell_fill:
                    self._rect(x, cw, height, cell_fill[j], 0.5)
                for li, line in enumerate(lines):
                    self._put(x + pad, self.y + pad + li * lh, line, fontsize=size, family=fam[j],
                              weight="bold" if bold else "normal", zorder=2)
                x += cw
            self.y += height
            self.fig.add_artist(Line2D([MARGIN, MARGIN + self.width], [self.h - self.y] * 2, lw=0.4, color="0.6",
                                       transform=self.fig.dpi_scale_trans))

        head = layout(header) if header is not None else None
        body = [layout(r) for r in rows]
        self._room((head[1] if head else 0) + (body[0][1] if body else 0))
        if head:
            draw(*head, COLORS["head"], bold=True)
        for i, (wrapped, height) in enumerate(body):
            if self.y + height > self.h - MARGIN - 0.2:
                self.new_page()
                if head:
                    draw(*head, COLORS["head"], bold=True)
            fills = {j: c for (r, j), c in colors.items() if r == i}
            draw(wrapped, height, COLORS["stripe"] if i % 2 else "white", cell_fill=fills)
        self.y += after

    def key_values(self, pairs: Sequence[tuple[str, str]], *, per_row: int = 1, key_width: float = 1.0,
                   value_width: float = 3.0, value_family: str = "sans-serif") -> None:
        """Name/value pairs as a table without header, ``per_row`` pairs side by side."""
        pairs = list(pairs) + [("", "")] * (-len(pairs) % per_row)
        rows = [[c for kv in pairs[i:i + per_row] for c in kv] for i in range(0, len(pairs), per_row)]
        keys = {(r, 2 * j): COLORS["head"] for r, row in enumerate(rows) for j in range(per_row) if row[2 * j]}
        self.table(None, rows, [key_width, value_width] * per_row, colors=keys,
                   families=["sans-serif", value_family] * per_row)

    def figure(self, title: str, nrows: int, ncols: int, *, caption: str = "",
               subtitle: str = "") -> tuple[Figure, np.ndarray, float]:
        """A figure page: a title band, a grid of axes, a legend band and a wrapped caption.

        Returns
        -------
        fig, axes, legend_y
            ``axes`` has shape ``(nrows, ncols)``; ``legend_y`` is the figure-fraction height of
            the top of the legend band (see :func:`_legend`). Finish with :meth:`save`.
        """
        self.finish_page()
        fig = self._figure()
        tr = fig.dpi_scale_trans
        lines = wrap_text(caption, self.width, SMALL) if caption else []
        lh = SMALL * LEADING / 72
        cap_h = len(lines) * lh + 0.1
        bottom, top = 0.45 + cap_h + 0.28, 0.62 + (0.3 if subtitle else 0)
        # fixed margins in inches (constrained layout would double the rendering time): room on the
        # left of every panel for tick labels and a y label, between rows for x labels and a title
        left, gap_w, gap_h = 0.72, 0.8, 0.85
        aw = (self.width - left - (ncols - 1) * gap_w) / ncols
        ah = (self.h - bottom - top - 0.8 - (nrows - 1) * gap_h) / nrows
        axes = fig.subplots(nrows, ncols, squeeze=False, gridspec_kw=dict(
            left=(MARGIN + left) / self.w, right=(self.w - MARGIN) / self.w, bottom=(bottom + 0.5) / self.h,
            top=1 - (top + 0.3) / self.h, wspace=gap_w / aw, hspace=gap_h / ah))
        fig.text(MARGIN, self.h - 0.4, title, transform=tr, fontsize=HEAD + 1, weight="bold", va="top")
        if subtitle:
            fig.text(MARGIN, self.h - 0.7, subtitle, transform=tr, fontsize=BODY, va="top", color="0.25")
        for i, line in enumerate(lines):
            fig.text(MARGIN, 0.4 + cap_h - i * lh, line, transform=tr, fontsize=SMALL, va="top", color="0.15")
        return fig, axes, (bottom - 0.02) / self.h


def write_report(path: str | os.PathLike, build: Callable[[ReportDocument], None], *, footer: str = "",
                 metadata: dict | None = None) -> int:
    """Build a report with ``build(doc)`` and write it atomically to ``path``; return its page count.

    The PDF goes to a temporary file in the target directory and is renamed over ``path`` only
    when complete (:func:`simkit.engine._atomic_write_bytes`); on error nothing is left behind.
    """
    pages = []

    def writer(tmp: str) -> None:
        meta = {"Creator": "simkit.report", "CreationDate": None, **(metadata or {})}
        with mpl.rc_context(STYLE), PdfPages(tmp, metadata=meta) as pdf:
            doc = ReportDocument(pdf, footer)
            build(doc)
            doc.finish_page()
            pages.append(doc.pages)
        # mkstemp made the file 0600; a report is meant to be read, so apply the umask instead
        umask = os.umask(0o022)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)

    _atomic_write_bytes(Path(path), writer, ".pdf")
    return pages[0]


# ------------------------------------------------------------------------------------------------
# provenance (generic)

_PROVENANCE = ("study", "claim", "title", "created", "wall_time_s", "git_commit", "simkit_version", "platform",
               "engine", "n_workers", "resumed_tasks", "seed", "seed_scheme", "package_versions", "ademp", "config",
               "errors")


def _json_attr(ds: xr.Dataset, name: str, default):
    raw = ds.attrs.get(name, default)
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return raw


def provenance_pages(doc: ReportDocument, ds: xr.Dataset, *, claim_text: str = "") -> None:
    """The provenance section of any simkit report, from the dataset's attributes alone.

    Lists study, claim, title, creation time, wall time, git commit, simkit and package versions,
    platform, engine, dimensions, seed and seed scheme, any further attributes, the ADEMP statement,
    the full configuration and every recorded error (``attrs["errors"]`` and ``cell_error``).
    """
    a = ds.attrs
    get = lambda k: str(a.get(k, "not recorded"))  # noqa: E731
    versions = _json_attr(ds, "package_versions", "not recorded")
    if isinstance(versions, dict):
        versions = " · ".join(f"{k} {v}" for k, v in versions.items())
    sizes = ", ".join(f"{k} = {v}" for k, v in ds.sizes.items() if not k.endswith(("_dim0", "_dim1", "word")))
    doc.new_page()
    doc.heading("Provenance", size=HEAD + 1)
    doc.key_values([
        ("study", get("study")), ("claim", get("claim") + (f" — {claim_text}" if claim_text else "")),
        ("title", get("title")), ("created (UTC)", get("created")), ("wall time", f"{get('wall_time_s')} s"),
        ("git commit", get("git_commit")), ("simkit version", get("simkit_version")), ("platform", get("platform")),
        ("engine", f"{get('engine')}; workers {get('n_workers')}; resumed tasks {get('resumed_tasks')}"),
        ("dimensions", sizes), ("seed", get("seed")), ("seed scheme", get("seed_scheme")),
        ("other attributes", "; ".join(f"{k} = {v}" for k, v in a.items() if k not in _PROVENANCE) or "none"),
        ("package versions", str(versions)),
    ], per_row=2, key_width=0.9, value_width=2.6)
    ademp = _json_attr(ds, "ademp", {})
    if isinstance(ademp, dict) and ademp:
        doc.heading("ADEMP (Morris, White & Crowther 2019)")
        doc.key_values([(k, str(v)) for k, v in ademp.items()], key_width=0.8, value_width=7.0)
    cfg = _json_attr(ds, "config", "not recorded")
    doc.heading("Configuration")
    if isinstance(cfg, dict):
        doc.key_values([(k, json.dumps(v)) for k, v in cfg.items()], per_row=3, key_width=1.0, value_width=1.6,
                       value_family="monospace")
    else:
        doc.text(str(cfg), family="monospace", size=TABLE)
    doc.heading("Recorded errors")
    errors = _json_attr(ds, "errors", [])
    errors = errors if isinstance(errors, list) else [{"error": str(errors)}]
    if errors:
        rows = [[json.dumps(e.get("cell", e.get("cell_index", ""))), str(e.get("stage", "")), str(e.get("block", "")),
                 f"{e.get('seed', '')} / {e.get('spawn_key', '')}", str(e.get("error", ""))] for e in errors[:25]]
        doc.table(["cell", "stage", "block", "seed / spawn key", "error"], rows, [2.2, 0.6, 0.5, 2.0, 3.5])
        if len(errors) > 25:
            doc.text(f"… and {len(errors) - 25} more (all in the dataset attribute 'errors').", size=TABLE)
    else:
        doc.text("No task raised an error (attribute 'errors' is empty).", size=TABLE)
    if "cell_error" in ds:
        cdim = ds["cell_error"].dims[0]
        bad = [(str(c), str(e)) for c, e in zip(ds[cdim].values, ds["cell_error"].values) if str(e)]
        if bad:
            doc.text(f"Errors per cell (variable 'cell_error', by {cdim}):", size=TABLE, keep=2)
            doc.key_values(bad, key_width=1.0, value_width=7.0)


# ------------------------------------------------------------------------------------------------
# plotting helpers

_SUP = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def _power_label(value: float, base: int = 10) -> str:
    """``base`` with a Unicode superscript exponent: plain text, much cheaper than mathtext."""
    e = math.log(value, base) if value > 0 else 0.5
    return f"{base}{str(round(e)).translate(_SUP)}" if abs(e - round(e)) < 1e-9 else ""


def _log_axes(ax: Axes, k: np.ndarray, *ys: np.ndarray) -> None:
    """Log k axis over the grid ``k`` (base 2) and, if arrays ``ys`` are given, a log value axis.

    Limits are set explicitly, so a panel whose values are all NaN or non-positive (a fit that
    failed) stays drawable and says so instead of breaking the log scale.
    """
    ax.set_xscale("log", base=2)
    ax.set_xlim(k[0] / 1.4, k[-1] * 1.4)
    ax.xaxis.set_major_locator(LogLocator(base=4))  # ticks at even powers of 2
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _power_label(v, 2)))
    if ys:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _power_label(v)))
        ax.yaxis.set_minor_formatter(NullFormatter())
        y = np.concatenate([np.ravel(a) for a in ys])
        y = y[np.isfinite(y) & (y > 0)]
        if y.size:
            ax.set_ylim(y.min() / 3, y.max() * 3)
        else:
            ax.set_ylim(0.1, 10)
            ax.text(0.5, 0.5, "no positive values", transform=ax.transAxes, ha="center", fontsize=SMALL)


def _legend(fig: Figure, y: float, handles: list) -> None:
    """One legend for the page, in the band reserved below the axes (it never covers data)."""
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, y), ncol=len(handles), frameon=False)


def _marker(color: str, marker: str = "o", hollow: bool = False, label: str = "") -> Line2D:
    return Line2D([], [], marker=marker, color=color, ls="", mfc="white" if hollow else color, label=label)


def _line(color: str, ls: str = "-", lw: float = 1.2, label: str = "") -> Line2D:
    return Line2D([], [], color=color, ls=ls, lw=lw, label=label)


# ------------------------------------------------------------------------------------------------
# the rate_k report (claim C1)

C1_TEXT = (
    "Claim C1 (finite-k bias, rate 1/k). The InfoNCE risk with k negatives exceeds log k plus the cross-entropy "
    "CE(M, Q) of the positive kernel M against the softmax retrieval kernel Q by gap_k = R_k − log k − CE, and this "
    "gap vanishes at rate 1/k, not at the rate 1/√k of earlier analyses. More precisely gap_k = c1/k + O(1/k²) with "
    "the exactly computable constant c1 = E_x[ m1(x)/Z(x) − (Z2(x)/Z(x)² − 1)/2 ] (THEORY.md, C1). So a log–log "
    "regression of gap_k on k must give slope −1 and reject −1/2, and k·gap_k must approach c1.")


def _v(ds: xr.Dataset, name: str, i: int):
    """Value of a per-setting variable (row ``i``); NaN when the dataset lacks it."""
    return ds[name].values[i] if name in ds.variables else np.nan


def _label(ds: xr.Dataset, name: str, text: str | None = None) -> str:
    """Axis label from the variable's ``long_name`` (or ``text``) and ``units`` attributes."""
    attrs = ds[name].attrs if name in ds.variables else {}
    text, units = text or attrs.get("long_name", name), attrs.get("units", "1")
    return text if units in ("1", "") else f"{text} ({units})"


def _results_table(ds: xr.Dataset) -> tuple[list[str], list[list[str]], list[float], dict]:
    alpha = float(ds.attrs.get("alpha", np.nan))
    header = ["setting", "π", "d", "κ_M", "τ", "k_min", "slope ± jackknife SE",
              f"95% CI\n{100 * (1 - alpha):g}% CI (verdict)", "p-value of slope = −1/2",
              "plain slope (no 1/k term) ± SE", "c1 estimate ± MCSE", "c1 exact ± MCSE", "z of c1", "verdict"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        f = {n: float(_v(ds, n, i)) for n in ("slope_se", "slope_ci_low", "slope_ci_high", "slope_verdict_low",
                                              "slope_verdict_high", "slope_p_half", "c1_z", "k_min", "kappa_pi")}
        dec = _decimals(f["slope_se"]) if f["slope_se"] > 0 else 4  # NaN compares False
        ci = f"[{_num(f['slope_ci_low'], dec)}, {_num(f['slope_ci_high'], dec)}]" \
            if math.isfinite(f["slope_ci_low"]) else "n/a"
        if math.isfinite(f["slope_verdict_low"]):
            ci += f"\n[{_num(f['slope_verdict_low'], dec)}, {_num(f['slope_verdict_high'], dec)}]"
        fam, verdict = str(_v(ds, "pi", i)), str(_v(ds, "verdict", i))
        fin = lambda x, fmt: format(x, fmt).replace("-", MINUS) if math.isfinite(x) else "n/a"  # noqa: E731
        rows.append([
            str(s), f"{fam}\nκ_π = {f['kappa_pi']:g}" if fam != "uniform" and math.isfinite(f["kappa_pi"]) else fam,
            f"{_v(ds, 'dim', i)}", f"{float(_v(ds, 'kappa_m', i)):g}", f"{float(_v(ds, 'tau', i)):g}",
            fin(f["k_min"], "g"), format_pm(_v(ds, "slope", i), f["slope_se"]), ci, fin(f["slope_p_half"], ".2g"),
            format_pm(_v(ds, "slope_plain", i), _v(ds, "slope_plain_se", i)),
            format_pm(_v(ds, "c1_estimate", i), _v(ds, "c1_estimate_mcse", i)),
            format_pm(_v(ds, "c1_exact", i), _v(ds, "c1_exact_mcse", i)), fin(f["c1_z"], "+.2f"), verdict.upper()])
        colors[(i, len(header) - 1)] = COLORS.get(verdict, COLORS["fail"])
    return header, rows, [0.82, 0.62, 0.25, 0.38, 0.38, 0.46, 1.33, 1.42, 0.68, 1.0, 1.1, 1.05, 0.5, 0.52], colors


def _title_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    cfg = _json_attr(ds, "config", {})
    cfg = cfg if isinstance(cfg, dict) else {}
    n_blocks, n_set = ds.sizes.get("block", cfg.get("n_blocks", "?")), ds.sizes["setting"]
    alpha = float(ds.attrs.get("alpha", np.nan))
    zcrit = stats.norm.isf(alpha / 2) if math.isfinite(alpha) else np.nan
    doc.new_page()
    doc.text(str(ds.attrs.get("title", "Claim C1")), size=TITLE, weight="bold", after=0.02)
    doc.text(f"simkit study '{ds.attrs.get('study', 'rate_k')}' · dataset created {ds.attrs.get('created', '?')} · "
             f"seed {ds.attrs.get('seed', '?')} · commit {str(ds.attrs.get('git_commit', '?'))[:12]}"
             f"{' · quick design' if cfg.get('quick') else ''}", size=SMALL, color="0.3", after=0.12)
    doc.text(C1_TEXT, after=0.1)
    doc.text(
        f"Method. For each setting (π, kernel M = vMF(x, κ_M), temperature τ, φ = identity on S^(d−1)) the study "
        f"runs {n_blocks} independent replicate blocks of {cfg.get('block_anchors', '?')} anchors. A streaming "
        f"InfoNCE estimator evaluates gap_k for every k = 1, 2, 4, …, {int(ds['k'].values.max())} from the same "
        f"negatives (common random numbers across k), with control variates whose conditional means are known "
        f"exactly, so that gap_k is estimated without the Monte Carlo noise of R_k and CE separately. The rate is the "
        f"slope of a weighted least-squares fit of log gap_k on log k and 1/k over k ≥ k_min (the 1/k term absorbs "
        f"the O(1/k²) correction; k_min = smallest grid k ≥ {cfg.get('k_min_factor', '?')} × the expansion scale); "
        f"the 'plain' slope omits the 1/k term. c1 and c2 come from a WLS fit of gap_k on 1/k and 1/k² over the same "
        f"range, and c1 is compared with its exact value (z-score). Every standard error is a delete-one-block "
        f"jackknife over the independent blocks, which accounts for the correlation across k; intervals use "
        f"Student t with {n_blocks} − 1 degrees of freedom. Values are printed as estimate ± MCSE (or SE).", after=0.1)
    verdicts = [str(v) for v in ds["verdict"].values]
    doc.heading(f"Regression results and verdicts: {verdicts.count('pass')} of {n_set} settings pass")
    header, rows, widths, colors = _results_table(ds)
    doc.table(header, rows, widths, colors=colors, size=8.0)
    doc.text(
        f"Verdict rule (α = {alpha:g}, dataset attribute 'alpha'). A setting passes when (i) the level-{1 - alpha:g} "
        f"jackknife t-interval of the slope (second line of the CI column) contains −1, (ii) slope = −1/2 is "
        f"rejected at level α, and (iii) |z| ≤ z_(1−α/2) = {zcrit:.2f}, where z = (c1 estimate − c1 exact)/√(MCSE² + "
        f"MCSE_exact²). A setting one of whose tasks raised is marked 'error' whatever its checks (its summaries use "
        f"the finished blocks only). The dataset's own statement: "
        f"“{ds['verdict'].attrs.get('description', 'not recorded')}”.", size=SMALL)
    doc.text(
        f"False-failure rate. If C1 holds, check (i) fails with probability α and check (iii) with probability α "
        f"(nominally: t and normal approximations with jackknife standard errors); check (ii) fails only for lack of "
        f"power. So a setting for which C1 is true fails with probability at most 2α = {2 * alpha:g}, and at least one "
        f"of the {n_set} settings with probability at most {2 * alpha * n_set:g} (union bound). Intervals, p and z "
        f"are functions of the estimates and standard errors shown, and carry no separate MCSE.", size=SMALL)
    errs = ds["cell_error"].values if "cell_error" in ds else [""] * n_set
    rows_bad = [i for i in range(n_set) if verdicts[i] != "pass" or str(errs[i])]
    bad = [[str(ds["setting"].values[i]), f"{verdicts[i]}: {_v(ds, 'verdict_reason', i) or '—'}", str(errs[i]) or "—"]
           for i in rows_bad]
    if bad:
        doc.heading("Failures and task errors")
        doc.table(["setting", "verdict: why", "task errors (variable cell_error)"], bad, [1.0, 4.0, 4.0],
                  colors={(i, 0): COLORS.get(verdicts[j], COLORS["fail"]) for i, j in enumerate(rows_bad)})
    else:
        doc.text("All settings pass; no task raised an error.", size=SMALL, weight="bold")


def _empty(ax: Axes, ds: xr.Dataset, i: int) -> bool:
    """Mark the panel of a setting without finite gap estimates (a failed cell); True if so."""
    if np.any(np.isfinite(ds["gap"].values[i])):
        return False
    why = f"no estimates: {_v(ds, 'verdict_reason', i) or 'failed'}. "
    why += str(_v(ds, "cell_error", i)) if "cell_error" in ds else ""
    ax.text(0.5, 0.5, "\n".join(textwrap.wrap(why, 40)), transform=ax.transAxes, ha="center", va="center",
            fontsize=SMALL, color=COLORS["fit"])
    ax.set(xticks=[], yticks=[], title=str(ds["setting"].values[i]))
    return True


def _fit_mask(k: np.ndarray, kmin: float) -> np.ndarray:
    return k >= kmin if math.isfinite(kmin) else np.zeros(k.shape, bool)


def residual_panel(ax: Axes, k: np.ndarray, r: np.ndarray, sel: np.ndarray) -> str:
    """Standardised residuals ``r`` against ``k`` on one panel: filled points in the fit (``sel``),
    hollow grey points outside it, grey triangles at the edge for residuals beyond the axis range
    (which covers the in-fit points), reference lines at 0, +-2 and +-3.

    Returns the largest off-scale residual, formatted, or "" when every point is on scale.
    """
    for lv, ls in ((2, "--"), (3, ":")):
        for sgn in (-1, 1):
            ax.axhline(sgn * lv, color=COLORS["ref"], ls=ls, lw=0.8)
    ax.axhline(0, color="0.3", lw=0.5)
    in_fit = r[sel & np.isfinite(r)]
    top = max(5.0, 1.2 * float(np.abs(in_fit).max())) if in_fit.size else 5.0
    off = np.isfinite(r) & (np.abs(r) > top)
    ax.plot(k[sel], r[sel], "o", color=COLORS["data"], ms=4, zorder=4)
    ax.plot(k[~sel & ~off], r[~sel & ~off], "o", mfc="none", color="0.55", ms=4, zorder=4)
    for sgn, mk in ((1, "^"), (-1, "v")):
        m = off & (np.sign(r) == sgn)
        ax.plot(k[m], np.full(m.sum(), sgn * 0.96 * top), mk, color="0.55", ms=4, zorder=4)
    ax.set_ylim(-top, top)
    _log_axes(ax, k)
    if not np.isfinite(r).any():
        ax.text(0.5, 0.6, "no fit (see the verdict table)", transform=ax.transAxes, ha="center", fontsize=SMALL)
    return _num(r[off][np.argmax(np.abs(r[off]))], 0) if off.any() else ""


def residual_legend(fig: Figure, y: float) -> None:
    """The legend of :func:`residual_panel`."""
    _legend(fig, y, [_marker(COLORS["data"], label="in the fit (k ≥ k_min)"),
                     _marker("0.55", hollow=True, label="outside the fit (k < k_min)"),
                     _marker("0.55", "^", label="off scale"), _line(COLORS["ref"], "--", label="±2"),
                     _line(COLORS["ref"], ":", label="±3")])


def _gap_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(2 * ds["gap_mcse"].values[idx] / ds["gap"].values[idx])
    rel = rel[np.isfinite(rel)]
    cap = "Points: gap_k estimated with control variates; error bars ±2 MCSE (sd over blocks / √n_blocks)"
    if rel.size:
        cap += f"; the largest is {100 * rel.max():.2g}% of gap_k" + (", most are hidden by the markers"
                                                                   if rel.max() < 0.05 else "")
    cap += ". "
    cap += ("Red line: the fitted log gap_k = a + b log k + c/k over the shaded fit range k ≥ k_min; grey: reference "
            "slopes 1/k (dashed) and 1/√k (dotted) through the data at k_min, C1 predicting the first; black: the "
            "exact gap (closed form, uniform π only).")
    fig, axes, ly = doc.figure("Finite-k gap on log–log axes: the rate is 1/k", 1, len(idx), caption=cap,
                               subtitle="slope of the WLS fit ± jackknife SE in each panel title")
    for ax, i in zip(axes[0], idx):
        if _empty(ax, ds, i):
            continue
        gap, se, kmin = ds["gap"].values[i], ds["gap_mcse"].values[i], float(_v(ds, "k_min", i))
        sel = _fit_mask(k, kmin)
        if sel.any():
            ax.axvspan(kmin / 1.25, k[-1] * 1.25, color=COLORS["span"], zorder=0)
            j = int(np.argmax(sel))
            ax.plot(k, gap[j] * k[j] / k, "--", color=COLORS["ref"], lw=0.9)
            ax.plot(k, gap[j] * np.sqrt(k[j] / k), ":", color=COLORS["ref"], lw=1.1)
            ax.plot(k[sel], ds["fit_gap"].values[i][sel], color=COLORS["fit"], lw=2.4, zorder=3)
        ex = ds["gap_exact"].values[i] if "gap_exact" in ds else np.full(k.size, np.nan)
        if np.any(np.isfinite(ex)):
            ax.plot(k, ex, color=COLORS["exact"], lw=0.6, zorder=4)
        ok = np.isfinite(gap) & (gap > 0)  # a log axis shows positive values only; clip the lower bars there
        ax.errorbar(k[ok], gap[ok], yerr=[np.minimum(2 * se[ok], 0.999 * gap[ok]), 2 * se[ok]], fmt="o", ms=3.5,
                    color=COLORS["data"], mfc="white", zorder=5)
        _log_axes(ax, k, gap)
        ax.set_title(f"{ds['setting'].values[i]}: slope {format_pm(_v(ds, 'slope', i), _v(ds, 'slope_se', i))}")
        ax.set(xlabel=_label(ds, "k"), ylabel=_label(ds, "gap", "gap_k = R_k − log k − CE"))
    _legend(fig, ly, [_marker(COLORS["data"], hollow=True, label="gap_k ± 2 MCSE"),
                      _line(COLORS["fit"], lw=2.4, label="WLS fit (log k and 1/k)"),
                      _line(COLORS["ref"], "--", label="reference slope 1/k"),
                      _line(COLORS["ref"], ":", label="reference slope 1/√k"),
                      _line(COLORS["exact"], lw=0.6, label="exact gap (uniform π)"),
                      Patch(color=COLORS["span"], label="fit range k ≥ k_min")])
    doc.save(fig)


def _kgap_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Top: k·gap_k over the whole grid; bottom: the fit range k ≥ k_min enlarged. Error bars ±2 MCSE "
           "(k_gap_mcse). Green: the exact c1 with a band of ±2 MCSE of the exact value (a thin line where c1 is "
           "exact). Red: the fitted k·(c1/k + c2/k²) = c1 + c2/k over the fit range, with c1, c2 from the WLS fit of "
           "gap_k on 1/k and 1/k².")
    fig, axes, ly = doc.figure("k · gap_k approaches the predicted constant c1", 2, len(idx), caption=cap,
                               subtitle="estimated c1 ± jackknife MCSE in each panel title")
    for col, i in enumerate(idx):
        for row, ax in enumerate(axes[:, col]):
            if _empty(ax, ds, i):
                continue
            kg, se, kmin = ds["k_gap"].values[i], ds["k_gap_mcse"].values[i], float(_v(ds, "k_min", i))
            fsel = _fit_mask(k, kmin)
            sel = fsel if row else np.ones(k.shape, bool)
            c1, c1se = float(_v(ds, "c1_exact", i)), float(_v(ds, "c1_exact_mcse", i))
            if math.isfinite(c1):
                if c1se > 0:
                    ax.axhspan(c1 - 2 * c1se, c1 + 2 * c1se, color=COLORS["band"], alpha=0.25, lw=0)
                ax.axhline(c1, color=COLORS["band"], lw=0.8)
            a, b = float(_v(ds, "c1_estimate", i)), float(_v(ds, "c2_estimate", i))
            if math.isfinite(a) and math.isfinite(b) and fsel.any():
                kk = np.geomspace(k[fsel][0], k[-1], 200)
                ax.plot(kk, a + b / kk, color=COLORS["fit"], lw=1.3, zorder=3)
            ax.errorbar(k[sel], kg[sel], yerr=2 * se[sel], fmt="o", ms=3.5, mfc="white", color=COLORS["data"],
                        zorder=5)
            _log_axes(ax, k)
            if row:
                y = np.concatenate([kg[sel] - 2 * se[sel], kg[sel] + 2 * se[sel], [c1 - 2 * c1se, c1 + 2 * c1se]])
                y = y[np.isfinite(y)]
                if y.size:
                    pad = 0.08 * (y.max() - y.min()) + 1e-9 * max(1.0, abs(y.max()))
                    ax.set_ylim(y.min() - pad, y.max() + pad)
                if sel.any():
                    ax.set_xlim(k[sel][0] / 1.4, k[-1] * 1.4)
                ax.ticklabel_format(axis="y", useOffset=False)
                ax.set_title(f"fit range k ≥ {kmin:g}; exact c1 = {format_pm(c1, c1se).replace(' (exact)', '')}")
            else:
                ax.set_title(f"{ds['setting'].values[i]}: c1 "
                             f"{format_pm(_v(ds, 'c1_estimate', i), _v(ds, 'c1_estimate_mcse', i))}")
            ax.set(xlabel=_label(ds, "k"), ylabel=_label(ds, "k_gap", "k · gap_k"))
    _legend(fig, ly, [_marker(COLORS["data"], hollow=True, label="k·gap_k ± 2 MCSE"),
                      Patch(color=COLORS["band"], alpha=0.5, label="exact c1 ± 2 MCSE"),
                      _line(COLORS["fit"], lw=1.3, label="fit c1 + c2/k (k ≥ k_min)")])
    doc.save(fig)


def _resid_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k = ds["k"].values.astype(float)
    cap = ("Standardised residuals (estimate − fit)/MCSE of the rate fit (top, on the log scale) and of the c1 fit "
           "(bottom). Filled points: k ≥ k_min, in the fit; hollow grey points: k < k_min, outside it, where the "
           "O(1/k²) remainder dominates and residuals are large by design; grey triangles at the edge: residuals "
           "beyond the axis range (the largest is given in the panel title). Dashed lines: ±2; dotted: ±3.")
    fig, axes, ly = doc.figure("Residuals of the two fits", 2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        for row, (name, what) in enumerate((("resid_rate", "rate fit"), ("resid_c1", "c1 fit"))):
            ax = axes[row, col]
            if _empty(ax, ds, i):
                continue
            r, sel = ds[name].values[i], _fit_mask(k, float(_v(ds, "k_min", i)))
            worst = residual_panel(ax, k, r, sel)
            big = f"; largest off scale {worst}" if worst else ""
            ax.set(title=f"{ds['setting'].values[i]}: {what}{big}", xlabel=_label(ds, "k"),
                   ylabel=_label(ds, name, "standardised residual"))
    residual_legend(fig, ly)
    doc.save(fig)


def _variance_page(doc: ReportDocument, ds: xr.Dataset, idx: list[int]) -> None:
    k, n = ds["k"].values.astype(float), int(ds.sizes.get("block", 0))
    cap = ("Top: Monte Carlo standard error of gap_k with the control variates (gap_mcse) and without them "
           "(gap_plain_mcse: the exact per-anchor limit subtracted only). Bottom: the variance-reduction factor "
           "(gap_plain_mcse / gap_mcse)², i.e. how many times more blocks the plain estimator would need for the "
           "same precision.")
    if n > 1:
        cap += (f" Each MCSE is itself estimated from {n} blocks, so the factor is uncertain by roughly "
                f"±{200 / math.sqrt(n - 1):.0f}% (normal theory, 2/√(n_blocks − 1)).")
    fig, axes, ly = doc.figure("Variance reduction by the control variates", 2, len(idx), caption=cap)
    for col, i in enumerate(idx):
        top, bot = axes[:, col]
        if _empty(top, ds, i) | _empty(bot, ds, i):
            continue
        cv, pl = ds["gap_mcse"].values[i], ds["gap_plain_mcse"].values[i]
        top.plot(k, pl, "s-", color=COLORS["plain"], ms=3.5, mfc="white")
        top.plot(k, cv, "o-", color=COLORS["data"], ms=3.5)
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = (pl / cv) ** 2
        ok = np.isfinite(gain) & (gain > 0)
        bot.plot(k[ok], gain[ok], "o-", color=COLORS["band"], ms=3.5)
        bot.axhline(1, color=COLORS["ref"], ls="--", lw=0.8)
        for ax, ys in ((top, (cv, pl)), (bot, (gain,))):
            _log_axes(ax, k, *ys)
            ax.set_xlabel(_label(ds, "k"))
        top.set(title=str(ds["setting"].values[i]), ylabel=_label(ds, "gap_mcse", "MCSE of gap_k"))
        bot.set_ylabel("variance-reduction factor")
    _legend(fig, ly, [Line2D([], [], marker="o", color=COLORS["data"], label="with control variates (gap_mcse)"),
                      Line2D([], [], marker="s", mfc="white", color=COLORS["plain"], label="plain (gap_plain_mcse)"),
                      Line2D([], [], marker="o", color=COLORS["band"], label="(plain / control-variate MCSE)²"),
                      _line(COLORS["ref"], "--", 0.8, label="no gain (factor 1)")])
    doc.save(fig)


_REQUIRED = ("setting", "k", "gap", "gap_mcse", "gap_plain_mcse", "k_gap", "k_gap_mcse", "fit_gap", "resid_rate",
             "resid_c1", "verdict")


def rate_k_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the C1 study (all but provenance), for its own report or the validation report."""
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a rate_k dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run rate_k')")
    n = ds.sizes["setting"]
    groups = [list(range(j, min(n, j + SETTINGS_PER_PAGE))) for j in range(0, n, SETTINGS_PER_PAGE)]
    _title_page(doc, ds)
    for page in (_gap_page, _kgap_page, _resid_page, _variance_page):
        for idx in groups:
            page(doc, ds, idx)


def rate_k_report(ds: xr.Dataset, path: str | os.PathLike) -> int:
    """Write the PDF report of the C1 study (``studies/rate_k.py``) from its dataset alone.

    Parameters
    ----------
    ds : xarray.Dataset
        The study's dataset, e.g. ``xr.open_dataset(path, engine="h5netcdf")``: summaries over
        ``(setting, k)`` with their MCSEs, fit results per setting, and ``attrs`` with ``alpha``,
        ``config``, ``ademp``, ``errors`` and the provenance the engine records.
    path : str or os.PathLike
        Output PDF, written atomically.

    Returns
    -------
    int
        Number of pages: a title page (more if its table overflows), four figure pages per group
        of up to three settings, and the provenance pages (one for a run like the default one).

    Notes
    -----
    Pages: (1) claim C1, method, regression results and verdicts per setting, the verdict rule and
    its false-failure rate; (2) gap_k on log–log axes with the fit, reference slopes 1/k and 1/√k
    and the exact gap; (3) k·gap_k against the exact c1; (4) standardised residuals of both fits;
    (5) MCSE with and without the control variates; (6) provenance. Every printed estimate
    carries its MCSE or jackknife SE.

    Raises
    ------
    ValueError
        If ``ds`` lacks a variable the report needs (it is not a rate_k dataset).

    References
    ----------
    THEORY.md, claim C1.
    """
    missing = [v for v in _REQUIRED if v not in ds.variables]
    if missing:
        raise ValueError(f"'ds' must be a rate_k dataset; it lacks {', '.join(map(repr, missing))} "
                         f"(open the output of 'simkit run rate_k')")

    def build(doc: ReportDocument) -> None:
        rate_k_sections(doc, ds)
        provenance_pages(doc, ds, claim_text="the finite-k InfoNCE bias decays as c1/k")

    footer = (f"simkit · {ds.attrs.get('study', 'rate_k')} · claim {ds.attrs.get('claim', 'C1')} · dataset created "
              f"{ds.attrs.get('created', '?')}")
    meta = {"Title": str(ds.attrs.get("title", "simkit rate_k report")), "Subject": "simkit claim C1"}
    return write_report(path, build, footer=footer, metadata=meta)
