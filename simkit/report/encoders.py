"""Report pages of the ``encoders`` study (C1, C2, C7 at InfoNCE-trained encoders): the verdict
tables, gap_k against the exact curve at phi_hat, k gap_k against c1, D_k, and retrieval along
training. Reads the saved dataset only."""

from __future__ import annotations

import math

import numpy as np
import xarray as xr

from simkit.report.document import COLORS, ReportDocument, format_pm
from simkit.report.spec import fin

__all__ = ["encoders_sections"]

TEXT = (
    "The encoder phi_hat is trained by InfoNCE (simkit.embeddings.training.train, L-BFGS-B) on tuples from the population "
    "(pi_N, M_N): pi_N is N atoms drawn from a vMF mixture on S^2, M_N the importance-weight (Discrete) "
    "approximation of a vMF or a rotated vMF kernel. Every population quantity at any phi - Z, m1, CE, c1, c2 and "
    "the whole gap curve - is then an exact finite sum, so the Monte Carlo curve of the trained encoder is tested "
    "against its exact curve. C1: slope -1 in the interval, -1/2 (the 1/sqrt(k) alternative) rejected, c1 and c2 "
    "against exact, curve and Z-free dgap against exact (max |t| over k, bootstrap reference). C2: slope of D_k = R_k - E CE(M_hat_k, "
    "Q_hat_k). Retrieval (pre-stated test): the training risk falls, and top-1 agreement rises and CE(M_hat, Q_hat) "
    "falls from the first to the last checkpoint (one-sided paired t over blocks).")


def _c1_table(doc: ReportDocument, ds: xr.Dataset) -> None:
    header = ["setting", "k_min", "slope ± SE", "p(slope = −1/2)", "c1 fitted ± MCSE\nc1 exact",
              "c2 fitted ± MCSE\nc2 exact", "p: curve\np: dgap", "C1 verdict"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        v = str(ds["verdict"].values[i])
        rows.append([str(s), fin(ds["k_min"].values[i], "g"), format_pm(ds["slope"].values[i], ds["slope_se"].values[i]),
                     fin(ds["slope_p_half"].values[i], ".2g"),
                     format_pm(ds["c1_estimate"].values[i], ds["c1_estimate_mcse"].values[i]) + "\n"
                     + fin(ds["c1_exact"].values[i], ".4f"),
                     format_pm(ds["c2_estimate"].values[i], ds["c2_estimate_mcse"].values[i]) + "\n"
                     + fin(ds["c2_exact"].values[i], ".4f"),
                     fin(ds["curve_p"].values[i], ".2g") + "\n" + fin(ds["dgap_p"].values[i], ".2g"), v.upper()])
        colors[(i, len(header) - 1)] = COLORS.get(v, COLORS["fail"])
    doc.table(header, rows, [1.0, 0.4, 1.0, 0.7, 1.1, 1.1, 0.7, 0.6], colors=colors)
    reasons = [f"{s}: {r}" for s, r in zip(ds["setting"].values, ds["verdict_reason"].values) if str(r)]
    if reasons:
        doc.text("C1 failures: " + "; ".join(reasons))


def _c2_table(doc: ReportDocument, ds: xr.Dataset) -> None:
    header = ["setting", "D_k slope ± SE", "p(−1/2)", "D_k verdict", "top-1 first → last", "recall@10 first → last",
              "CE(M̂,Q̂) first → last", "p top-1 / p CE", "Spearman(risk, top-1)", "retrieval verdict"]
    rows, colors = [], {}
    for i, s in enumerate(ds["setting"].values):
        g = lambda n, j: ds[n].values[i, j]  # noqa: E731
        dv, rv = str(ds["d2_verdict"].values[i]), str(ds["ret_verdict"].values[i])
        rows.append([str(s), format_pm(ds["d2_slope"].values[i], ds["d2_slope_se"].values[i]),
                     fin(ds["d2_slope_p_half"].values[i], ".2g"), dv.upper(),
                     f"{format_pm(g('ret_top1', 0), g('ret_top1_mcse', 0))}\n{format_pm(g('ret_top1', -1), g('ret_top1_mcse', -1))}",
                     f"{format_pm(g('ret_recall10', 0), g('ret_recall10_mcse', 0))}\n"
                     f"{format_pm(g('ret_recall10', -1), g('ret_recall10_mcse', -1))}",
                     f"{format_pm(g('ret_ce', 0), g('ret_ce_mcse', 0))}\n{format_pm(g('ret_ce', -1), g('ret_ce_mcse', -1))}",
                     fin(ds["ret_top1_p"].values[i], ".2g") + "\n" + fin(ds["ret_ce_p"].values[i], ".2g"),
                     fin(ds["ret_spearman"].values[i], "+.2f"), rv.upper()])
        colors[(i, 3)] = COLORS.get(dv, COLORS["fail"])
        colors[(i, len(header) - 1)] = COLORS.get(rv, COLORS["fail"])
    doc.table(header, rows, [1.0, 0.9, 0.5, 0.55, 0.9, 0.9, 0.9, 0.6, 0.6, 0.6], colors=colors)
    reasons = [f"{s}: {r}" for s, r in zip(ds["setting"].values, ds["ret_verdict_reason"].values) if str(r)]
    reasons += [f"{s} (D_k): {r}" for s, r in zip(ds["setting"].values, ds["d2_verdict_reason"].values) if str(r)]
    if reasons:
        doc.text("Failures: " + "; ".join(reasons))


def _curve_pages(doc: ReportDocument, ds: xr.Dataset) -> None:
    k = ds["k"].values.astype(float)
    n = ds.sizes["setting"]
    for lo in range(0, n, 4):
        idx = list(range(lo, min(n, lo + 4)))
        fig, axes, _ = doc.figure("gap_k at the trained encoder: Monte Carlo (±2 MCSE), exact, and k·gap_k", len(idx), 2,
                                  caption="Left: gap_k (points, ±2 MCSE) and the exact curve at phi_hat (line), log-log;"
                                          " the shaded range is k < k_min (outside the fits). Right: k·gap_k with the "
                                          "exact c1 (dashed) and k times the exact gap (line).")
        for r, i in enumerate(idx):
            ax, bx = axes[r, 0], axes[r, 1]
            gap, se, ex = ds["gap"].values[i], ds["gap_mcse"].values[i], ds["gap_exact"].values[i]
            ok = gap > 0
            ax.errorbar(k[ok], gap[ok], yerr=2 * se[ok], fmt="o", ms=3, color="C0")
            ax.plot(k, ex, "-", color="k", lw=1)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            kmin = float(ds["k_min"].values[i])
            if math.isfinite(kmin):
                ax.axvspan(k[0], kmin, color="0.9", zorder=0)
            ax.set_title(str(ds["setting"].values[i]), fontsize=9)
            ax.set_ylabel("gap_k (nats)")
            bx.errorbar(k, k * gap, yerr=2 * k * se, fmt="o", ms=3, color="C1")
            bx.plot(k, k * ex, "-", color="k", lw=1)
            bx.axhline(float(ds["c1_exact"].values[i]), ls="--", color="0.3")
            bx.set_xscale("log", base=2)
            bx.set_ylabel("k·gap_k (nats)")
        for ax in axes[-1]:
            ax.set_xlabel("k")
        doc.save(fig)


def _training_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    c = ds["ckpt"].values
    x = np.arange(c.size)
    fig, axes, _ = doc.figure("Along training: risk, exact CE, and retrieval at a database of k_ret points", 2, 2,
                              caption="Checkpoints after 0, 5, 20, 100 L-BFGS iterations from the same start. Training "
                                      "risk and exact CE(M, Q) of the population (pi_N, M_N); retrieval metrics ± 2 MCSE "
                                      "(same anchors and databases at every checkpoint).")
    panels = [("prep_train_risk", None, "training risk (nats)"), ("prep_ce_ckpt", None, "exact CE(M, Q) (nats)"),
              ("ret_top1", "ret_top1_mcse", "top-1 agreement"), ("ret_ce", "ret_ce_mcse", "CE(M̂, Q̂) (nats)")]
    for ax, (name, se, label) in zip(axes.ravel(), panels):
        for i, s in enumerate(ds["setting"].values):
            y = ds[name].values[i]
            if se is None:
                ax.plot(x, y, "o-", ms=3, label=str(s))
            else:
                ax.errorbar(x, y, yerr=2 * ds[se].values[i], fmt="o-", ms=3, label=str(s))
        ax.set_xticks(x, [str(v) for v in c])
        ax.set_xlabel("L-BFGS iterations")
        ax.set_ylabel(label)
    axes[0, 0].legend(fontsize=6)
    doc.save(fig)


def _d2_page(doc: ReportDocument, ds: xr.Dataset) -> None:
    k = ds["k"].values.astype(float)
    fig, axes, _ = doc.figure("C2: k·D_k, D_k = R_k − E CE(M̂_k, Q̂_k), at the trained encoder", 1, 1,
                              caption="k·D_k ± 2 MCSE per setting; a 1/k rate makes it level off.")
    ax = axes[0, 0]
    for i, s in enumerate(ds["setting"].values):
        ax.errorbar(k, k * ds["d2"].values[i], yerr=2 * k * ds["d2_mcse"].values[i], fmt="o-", ms=3, label=str(s))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("k·D_k (nats)")
    ax.legend(fontsize=6)
    doc.save(fig)


def encoders_sections(doc: ReportDocument, ds: xr.Dataset) -> None:
    """The pages of the encoders study (all but provenance), from its dataset alone."""
    for name in ("slope", "gap", "gap_exact", "d2", "ret_top1", "ret_verdict"):
        if name not in ds.variables:
            raise ValueError(f"'ds' must be an encoders dataset; it lacks {name!r} (open the output of "
                             f"'simkit run encoders')")
    doc.heading("Claims C1, C2, C7 at InfoNCE-trained encoders")
    doc.text(TEXT)
    doc.heading("C1 at phi_hat (C7: the -rot settings)")
    _c1_table(doc, ds)
    doc.heading("C2: the D_k rate and retrieval along training")
    _c2_table(doc, ds)
    _curve_pages(doc, ds)
    _d2_page(doc, ds)
    _training_page(doc, ds)
