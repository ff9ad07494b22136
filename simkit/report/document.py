"""The page machinery of simkit reports: :class:`ReportDocument` (A4-landscape flowing text and tables that
wrap and never overlap; figure pages with bands for a legend and a caption), :func:`format_pm`,
:func:`provenance_pages`, :func:`write_report` (atomic) and :func:`study_report`. Figures are plain
:class:`~matplotlib.figure.Figure` objects on an Agg canvas: no pyplot state is touched.
"""

from __future__ import annotations

import json
import math
import os
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
from matplotlib.patches import Rectangle
from matplotlib.textpath import text_to_path
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from simkit.runner.storage import atomic_write

__all__ = ["ReportDocument", "format_pm", "wrap_text", "auto_widths", "provenance_pages", "write_report",
           "study_report", "residual_panel"]

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
def _width_in(text: str, size: float, family: str = "sans-serif", weight: str = "normal") -> float:
    """Rendered width of one line in inches, from the font metrics (no renderer needed)."""
    font = FontProperties(family=family, size=size, weight=weight)
    w, _, _ = text_to_path.get_text_width_height_descent(text, font, ismath=False)
    return w / 72.0


def wrap_text(text: str, width: float, size: float, family: str = "sans-serif", weight: str = "normal") -> list[str]:
    """Greedy word wrap into lines at most ``width`` inches wide at ``size`` points (font metrics, 3% margin);
    newlines are kept and a word wider than a line is broken between characters."""
    width_in = lambda t: _width_in(t, size, family, weight)  # noqa: E731
    limit, space, out = 0.97 * width, width_in(" "), []
    for para in str(text).split("\n"):
        line, used = [], 0.0
        for word in para.split(" "):
            w = width_in(word)
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
                    lo, hi = (mid, hi) if width_in(word[:mid]) <= limit else (lo, mid - 1)
                cut = lo
                out.append(word[:cut])
                word = word[cut:]
                w = width_in(word)
            line, used = [word], w
        out.append(" ".join(line))
    return out


def auto_widths(header: Sequence[str] | None, rows: Sequence[Sequence[str]], width: float, size: float,
                families: Sequence[str] | None = None, pad: float = 0.12) -> list[float]:
    """Column widths (inches, summing to ``width``) from the content, as a browser lays out a table: each
    column gets at least its longest word (of the header too) and, while room is left, a share of its
    longest line in proportion to what it lacks; a table narrower than the page is stretched in proportion."""
    n = len(header if header is not None else rows[0])
    fam = list(families) if families is not None else ["sans-serif"] * n
    lo, hi = np.zeros(n), np.zeros(n)
    for r, row in enumerate(([header] if header is not None else []) + list(rows)):
        weight = "bold" if r == 0 and header is not None else "normal"
        for j, cell in enumerate(row):
            lines = str(cell).split("\n")
            lo[j] = max(lo[j], pad + max(_width_in(w, size, fam[j], weight) for line in lines
                                         for w in line.split(" ")) / 0.96)
            if r or header is None:  # a header wraps to the width its column's cells need
                hi[j] = max(hi[j], pad + max(_width_in(line, size, fam[j]) for line in lines) / 0.96)
    hi = np.maximum(hi, lo)
    if hi.sum() <= width or lo.sum() >= width:  # stretched, or too many columns: words break inside
        return list((hi if hi.sum() <= width else lo) * width / (hi if hi.sum() <= width else lo).sum())
    return list(lo + (width - lo.sum()) * (hi - lo) / (hi - lo).sum())


def _num(x: float, dec: int) -> str:
    return f"{x:.{dec}f}".replace("-", MINUS)


def format_pm(value: float, se: float, *, sig: int = 2) -> str:
    """``value ± se``, the error to ``sig`` significant figures and the value to match; ``se == 0`` prints
    ``value (exact)``, a non-finite value ``n/a``."""
    value, se = float(value), float(se)
    if not math.isfinite(value):
        return "n/a"
    if not math.isfinite(se):
        return f"{value:.4g} ± n/a".replace("-", MINUS)
    if se == 0:
        return f"{value:.6g} (exact)".replace("-", MINUS)
    dec = int(min(12, max(0, sig - 1 - math.floor(math.log10(se)))))
    return f"{_num(value, dec)} ± {_num(se, dec)}"


# ------------------------------------------------------------------------------------------------
# pages

class ReportDocument:
    """The pages of a PDF report (``pdf`` an open ``PdfPages``; ``footer`` on every page with the page number).

    Flowing items (text, headings, tables) are queued and laid out top-down when the flow ends (a figure
    page or :meth:`new_page`); what would not fit starts a new page (a table repeats its header). A last
    page holding only a few lines is avoided by setting the flow slightly smaller (down to 80%).
    """

    #: a flow's last page holding less than this (inches of text) is merged into the page before
    LONE = 1.8
    SCALES = (1.0, 0.95, 0.9, 0.85, 0.8)

    def __init__(self, pdf: PdfPages, footer: str = ""):
        self.pdf, self.footer = pdf, footer
        self.w, self.h = PAGE
        self.width = self.w - 2 * MARGIN
        self.fig: Figure | None = None
        self.y, self.pages = MARGIN, 0
        self._queue: list[tuple[str, tuple, dict]] = []
        self._dry, self._scale, self._fills = False, 1.0, [0.0]

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

    # -- the flow: queued, then laid out once its extent is known

    def _layout(self, scale: float, dry: bool) -> list[float]:
        """Lay out the queued flow at ``scale``; return the filled height of each page (inches)."""
        self._dry, self._scale, self._fills = dry, scale, [0.0]
        self.fig, self.y = (None if dry else self._figure()), MARGIN
        for j, (name, args, kw) in enumerate(self._queue):
            if name == "_heading" and j + 1 < len(self._queue):  # keep a heading with what follows it
                args = args[:2] + (max(args[2], self._first_height(*self._queue[j + 1])),)
            getattr(self, name)(*args, **kw)
        self._fills[-1] = self.y - MARGIN
        if not dry:
            self.save(self.fig)
        self.fig, self._dry, self._scale = None, False, 1.0
        return self._fills

    def _first_height(self, name: str, args: tuple, kw: dict) -> float:
        """Height of the first unbreakable piece of a queued item (a table's header and first row)."""
        if name != "_table":
            return 0.0
        header, rows, widths = args
        size, fam = kw.get("size", TABLE) * self._scale, kw.get("families") or ["sans-serif"] * len(widths)
        cols = [w * self.width / float(sum(widths)) for w in widths]
        rows = ([(header, "bold")] if header is not None else []) + [(r, "normal") for r in rows[:1]]
        return sum(max(len(wrap_text(c, cw - 0.1, size, f, wt)) for c, cw, f in zip(r, cols, fam)) * size * LEADING
                   / 72 + 0.1 for r, wt in rows)

    def finish_page(self) -> None:
        """Lay out and write the queued flow, if any: what follows starts on a new page."""
        if self._queue:
            fits = (s for s in self.SCALES if (f := self._layout(s, dry=True)) and (len(f) == 1 or f[-1] >= self.LONE))
            self._layout(next(fits, 1.0), dry=False)  # no scale joins the last lines: keep the full size
            self._queue = []

    new_page = finish_page

    def _break(self) -> None:
        self._fills[-1] = self.y - MARGIN
        self._fills.append(0.0)
        if not self._dry:
            self.save(self.fig)
            self.fig = self._figure()
        self.y = MARGIN

    def _room(self, height: float) -> None:
        if self.y + height > self.h - MARGIN - 0.2 and self.y > MARGIN:
            self._break()

    def _put(self, x: float, y: float, s: str, **kw) -> None:
        if not self._dry:
            self.fig.text(x, self.h - y, s, transform=self.fig.dpi_scale_trans, va="top", **kw)

    def _rect(self, x: float, width: float, height: float, color: str, z: float) -> None:
        if not self._dry:
            self.fig.add_artist(Rectangle((x, self.h - self.y - height), width, height, facecolor=color,
                                          edgecolor="none", transform=self.fig.dpi_scale_trans, zorder=z))

    def _rule(self) -> None:
        if not self._dry:
            self.fig.add_artist(Line2D([MARGIN, MARGIN + self.width], [self.h - self.y] * 2, lw=0.4, color="0.6",
                                       transform=self.fig.dpi_scale_trans))

    def text(self, text: str, **kw) -> None:
        """A wrapped paragraph (``size``, ``weight``, ``family``, ``color``, space ``after`` in inches);
        its first ``keep`` lines stay on one page."""
        self._queue.append(("_text", (text,), kw))

    def heading(self, text: str, size: float = HEAD, keep: float = 0.45) -> None:
        """A bold heading, kept on the page with ``keep`` inches (about three lines) of what follows."""
        self._queue.append(("_heading", (text, size, keep), {}))

    def table(self, header: Sequence[str] | None, rows: Sequence[Sequence[str]],
              widths: Sequence[float] | None = None, **kw) -> None:
        """A table (``header`` repeated after a page break, or None) whose cells wrap within their relative
        ``widths`` (by default from the content, :func:`auto_widths`); a row never splits. ``size``, ``colors``
        of cell ``(row, column)``, ``families``, ``after``."""
        rows = [list(r) for r in rows]
        if widths is None:
            widths = auto_widths(header, rows, self.width, kw.get("size", TABLE), kw.get("families"))
        self._queue.append(("_table", (header, rows, widths), kw))

    def _text(self, text: str, *, size: float = BODY, weight: str = "normal", family: str = "sans-serif",
              color: str = "black", after: float = 0.08, keep: int = 1) -> None:
        size, after = size * self._scale, after * self._scale
        lines = wrap_text(text, self.width, size, family, weight)
        lh = size * LEADING / 72
        self._room(lh * min(keep, len(lines)))
        for line in lines:
            self._room(lh)
            self._put(MARGIN, self.y, line, fontsize=size, weight=weight, family=family, color=color)
            self.y += lh
        self.y += after

    def _heading(self, text: str, size: float, keep: float) -> None:
        self._room((size * LEADING / 72 + 0.11) * self._scale + keep)
        self.y += 0.06 * self._scale
        self._text(text, size=size, weight="bold", after=0.05)

    def _table(self, header, rows, widths, *, size: float = TABLE, colors: dict | None = None,
               families: Sequence[str] | None = None, after: float = 0.15) -> None:
        size, after = size * self._scale, after * self._scale
        cols = [w * self.width / float(sum(widths)) for w in widths]
        fam = list(families) if families is not None else ["sans-serif"] * len(cols)
        pad, lh, colors = 0.05, size * LEADING / 72, colors or {}

        def layout(cells, weight="normal"):
            wrapped = [wrap_text(c, cw - 2 * pad, size, f, weight) for c, cw, f in zip(cells, cols, fam)]
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
            self._rule()

        head = layout(header, "bold") if header is not None else None
        body = [layout(r) for r in rows]
        self._room((head[1] if head else 0) + (body[0][1] if body else 0))
        if head:
            draw(*head, COLORS["head"], bold=True)
        for i, (wrapped, height) in enumerate(body):
            if self.y + height > self.h - MARGIN - 0.2:
                self._break()
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
        """A figure page: title band, ``(nrows, ncols)`` axes, legend band, caption. Returns ``fig, axes,
        legend_y`` (figure-fraction top of the legend band, see :func:`_legend`); finish with :meth:`save`."""
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
    """Build a report with ``build(doc)``, write it atomically to ``path`` (nothing on error); return the page count."""
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

    atomic_write(Path(path), writer, ".pdf")
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
    """The provenance pages of any report from the dataset's attributes: run, versions, seeds, ADEMP,
    configuration and every recorded error (``attrs["errors"]`` and ``cell_error``)."""
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
        err = ds["cell_error"]  # over the cell dimension, or over a grid of design factors (e.g. setting, tau)
        grid = np.meshgrid(*[ds[d].values.astype(str) for d in err.dims], indexing="ij")
        labels = np.array(grid).reshape(err.ndim, -1)
        bad = [(", ".join(c), str(e)) for c, e in zip(labels.T, err.values.ravel()) if str(e)]
        if bad:
            doc.text(f"Errors per cell (variable 'cell_error', by {', '.join(err.dims)}):", size=TABLE, keep=2)
            doc.key_values(bad, key_width=1.0, value_width=7.0)


# ------------------------------------------------------------------------------------------------
# plotting helpers

_SUP = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def _power_label(value: float, base: int = 10) -> str:
    """``base`` with a Unicode superscript exponent: plain text, much cheaper than mathtext."""
    e = math.log(value, base) if value > 0 else 0.5
    return f"{base}{str(round(e)).translate(_SUP)}" if abs(e - round(e)) < 1e-9 else ""


def _log_axes(ax: Axes, k: np.ndarray, *ys: np.ndarray) -> None:
    """Log axis over the grid ``k`` (base 2 for powers of 2) and, given ``ys``, a log value axis; explicit
    limits keep a panel without positive values drawable."""
    k = np.asarray(k, dtype=float)
    ax.set_xlim(k[0] / 1.4, k[-1] * 1.4)
    if np.all(np.log2(k) == np.round(np.log2(k))):  # a grid of powers of 2: ticks at even powers
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _power_label(v, 2)))
    elif k[-1] / k[0] <= 1e3:  # another short grid (e.g. temperatures): decimals at 1, 2, 5 times powers of 10
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:  # a long grid (e.g. half octaves): powers of 10, so that the labels do not collide
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _power_label(v)))
    ax.xaxis.set_minor_locator(NullLocator())
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
    n = len(handles)  # more than six entries: two rows, which the band below the axes still holds
    if n == 0:  # nothing drawn that needs a key (e.g. a design too small for a fit)
        return
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, y), ncol=n if n <= 6 else -(-n // 2),
               frameon=False, fontsize=8 if n <= 5 else 6.5)


def label(ds: xr.Dataset, name: str, text: str | None = None) -> str:
    """Axis label from the variable's ``long_name`` (or ``text``), with its ``units`` unless ``"1"``."""
    attrs = ds[name].attrs if name in ds.variables else {}
    text, units = text or attrs.get("long_name", name), attrs.get("units", "1")
    return text if units in ("1", "") else f"{text} ({units})"


def residual_panel(ax: Axes, k: np.ndarray, r: np.ndarray, sel: np.ndarray) -> str:
    """Standardised residuals ``r``: filled in the fit (``sel``), hollow grey outside, triangles off scale,
    lines at 0, ±2, ±3. Returns the largest off-scale residual, formatted, or ""."""
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


def study_report(study, ds: xr.Dataset, path: str | os.PathLike) -> int:
    """Write a study's PDF from its dataset alone: the study's :meth:`~simkit.runner.Study.report_sections`
    and the provenance pages, atomically. Returns the page count."""
    def build(doc: ReportDocument) -> None:
        study.report_sections(doc, ds)
        provenance_pages(doc, ds, claim_text=study.title)

    footer = (f"simkit · {ds.attrs.get('study', study.name)} · claim {ds.attrs.get('claim', study.claim)} · "
              f"dataset created {ds.attrs.get('created', '?')}")
    meta = {"Title": str(ds.attrs.get("title", study.title)), "Subject": f"simkit claim {study.claim}"}
    return write_report(path, build, footer=footer, metadata=meta)
