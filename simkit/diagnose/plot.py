"""Figure and PDF report of a :class:`~simkit.diagnose.Diagnosis`.

The bias axis is symmetric-log (linear within ±eps/10, logarithmic beyond), so a curve that crosses
zero or stays negative is drawn as it is; the exact curve carries its pointwise 95% band.
"""

from __future__ import annotations

import numpy as np

__all__ = ["plot_curve", "write_pdf", "report_figure"]


def plot_curve(dg, ax=None):
    if ax is None:
        import matplotlib.pyplot as plt
        _, ax = plt.subplots(figsize=(7, 4.5))
    eps = dg.eps
    kn = dg.k_needed()
    top = dg.k_max
    if kn.k is not None:
        top = max(top, int(min(4 * kn.k, 2**50)))
    if dg.k is not None:
        top = max(top, 2 * dg.k)
    kk = np.unique(np.round(np.geomspace(1, top, 300)))
    m, se = dg.curve(kk)
    inside = kk <= dg.k_max
    ax.fill_between(kk[inside], (m - 1.96 * se)[inside], (m + 1.96 * se)[inside], color="C0", alpha=0.25, lw=0,
                    label="exact: 95% band (anchor sampling)")
    ax.plot(kk[inside], m[inside], "-", color="C0", lw=1.6, label="exact finite-set bias gap_k")
    if (~inside).any() and dg.expansion_ok:
        ax.plot(kk[~inside], m[~inside], "-", color="C0", lw=1.0, alpha=0.6, label="beyond k_max: c1/k + c2/k²")
    pred = dg.c1 / kk + dg.c2 / kk**2
    ax.plot(kk, pred, "--", color="C2", lw=1.0, label="expansion c1/k + c2/k²")
    ax.errorbar(dg.ks_mc, dg.gap_mc, yerr=1.96 * np.nan_to_num(dg.gap_mc_mcse), fmt="o", ms=3, color="C1",
                capsize=2, label="Monte Carlo ± 1.96 MCSE")
    ax.axhspan(-eps, eps, color="0.85", alpha=0.6, lw=0, label=f"|bias| ≤ eps = {eps:g} nats")
    if kn.k is not None:
        ax.axvline(kn.k, color="C3", lw=1.0, ls=":", label=f"k needed: {kn.k}")
    if dg.k is not None:
        ax.axvline(dg.k, color="C4", lw=1.0, ls="-.", label=f"your k = {dg.k}")
    ax.axvline(dg.k_max, color="0.4", lw=0.6, ls=(0, (1, 3)))
    ax.set_xscale("log")
    shown = np.abs(np.concatenate([m[np.isfinite(m)], dg.gap_mc[np.isfinite(dg.gap_mc)]]))
    lim = max(float(shown.max()) if shown.size else eps, eps) * 2
    ax.set_yscale("symlog", linthresh=eps / 10)
    ax.set_ylim(-lim if np.any(m[np.isfinite(m)] < 0) or np.any(dg.gap_mc < 0) else -eps, lim)
    ax.axhline(0.0, color="0.3", lw=0.5)
    ax.set_xlabel("number of negatives k")
    ax.set_ylabel("bias gap_k = R_k − log k − CE (nats, symlog)")
    ax.set_title("finite-k InfoNCE bias")
    ax.legend(fontsize=7, loc="best")
    return ax


def write_pdf(dg, path) -> None:
    """One A4 page: the curve, and the summary's numbers in words below it."""
    from matplotlib.backends.backend_pdf import PdfPages
    with PdfPages(path) as pdf:
        pdf.savefig(report_figure(dg))


def report_figure(dg):
    """The report page as a matplotlib Figure (not attached to pyplot)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.27, 11.69))
    FigureCanvasAgg(fig)
    ax = fig.add_axes([0.11, 0.55, 0.83, 0.4])
    plot_curve(dg, ax)
    lines = []
    for line in dg.summary().splitlines():
        lines.extend(_wrap(line.strip(), 110))
    for i, line in enumerate(lines[:36]):
        fig.text(0.06, 0.48 - 0.0125 * i, line, fontsize=7, family="monospace")
    return fig


def _wrap(text: str, width: int) -> list[str]:
    import textwrap
    return textwrap.wrap(text, width, subsequent_indent="    ") or [""]

