"""``simkit diagnose FILE.npz [--tau T] [--k K] [--eps E] [--out X.nc] [--report X.pdf]``.

The npz file holds ``embeddings`` (N, d) and exactly one of ``labels`` (N,), ``positives`` (N, m)
(row indices) or ``positive_embeddings`` (N, m, d); it may hold a scalar ``tau``, used when
``--tau`` is not given (one of the two is required: the diagnosis depends on the temperature, and
a silent default would answer a different question). Prints a summary; writes the
:func:`simkit.diagnose` dataset with ``--out`` (netCDF) and a 1-2 page PDF with ``--report``: the
gap curve (Monte Carlo with error bars, exact, and the prediction c1/k + c2/k^2) and the answer to
"how many negatives".

Bad input prints one line ``simkit: error: ...`` naming the argument on stderr and exits with
status 2; every check, including the whole diagnosis, runs before anything is written.
"""

from __future__ import annotations

import os
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["add_parser", "run"]

_KERNEL_KEYS = ("labels", "positives", "positive_embeddings")
_ALLOWED = {"embeddings", "tau", *_KERNEL_KEYS}


def add_parser(subparsers) -> None:
    """Add the ``diagnose`` sub-command to an argparse sub-parser collection."""
    p = subparsers.add_parser("diagnose", help="finite-k InfoNCE bias of your own embeddings: how many negatives?")
    p.add_argument("file", help="npz with 'embeddings' and one of 'labels', 'positives', 'positive_embeddings'")
    p.add_argument("--tau", type=str, default=None, help="temperature (> 0; default: 'tau' stored in the npz)")
    p.add_argument("--k", type=str, default=None, help="number of negatives used in training (integer >= 1)")
    p.add_argument("--eps", type=str, default="0.01", help="tolerated bias in nats (> 0; default 0.01)")
    p.add_argument("--n-anchors", type=str, default="2048", help="anchors subsampled (default 2048)")
    p.add_argument("--n-tuples", type=str, default=str(1 << 15), help="Monte Carlo InfoNCE tuples (default 32768)")
    p.add_argument("--seed", type=str, default="0", help="seed of the subsampling and Monte Carlo (default 0)")
    p.add_argument("--out", type=str, default=None, help="write the dataset here (.nc)")
    p.add_argument("--report", type=str, default=None, help="write the PDF report here (.pdf)")


def _float(option: str, text: str) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"'{option}' must be a number, got {text!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"'{option}' must be finite, got {text!r}")
    if v <= 0:
        raise ValueError(f"'{option}' must be > 0, got {v!r}")
    return v


def _int(option: str, text: str, low: int) -> int:
    try:
        v = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"'{option}' must be an integer, got {text!r}") from None
    if v < low:
        raise ValueError(f"'{option}' must be >= {low}, got {v}")
    return v


def _path(option: str, text: str | None, suffix: str) -> Path | None:
    if text is None:
        return None
    if "\0" in text:
        raise ValueError(f"'{option}' must not contain a NUL character, got {text!r}")
    p = Path(text)
    if p.suffix.lower() != suffix:
        raise ValueError(f"'{option}' must end in {suffix}, got {text!r}")
    try:
        if p.is_dir():
            raise ValueError(f"'{option}' is a directory: {text!r}")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise ValueError(f"'{option}' must be in an existing directory, got {text!r}")
    except OSError as exc:
        raise ValueError(f"'{option}' is not a usable path ({exc.strerror}): {text!r}") from None
    if not os.access(parent, os.W_OK):
        raise ValueError(f"'{option}' is in a directory that is not writable: {text!r}")
    return p


def _load(text: str) -> dict[str, np.ndarray]:
    p = Path(text)
    if not p.is_file():
        raise ValueError(f"'FILE' does not exist or is not a file: {text!r}")
    try:
        with np.load(p, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError(f"'FILE' must be an .npz archive, got a single array in {text!r}")
            data = {name: z[name] for name in z.files}
    except ValueError as exc:
        if "'FILE'" in str(exc):
            raise
        raise ValueError(f"'FILE' is not a readable npz archive of numeric arrays ({' '.join(str(exc).split())}): "
                         f"{text!r}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"'FILE' is not a readable npz archive ({type(exc).__name__}): {text!r}") from None
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise ValueError(f"'FILE' holds unknown array {unknown[0]!r}; expected 'embeddings', one of "
                         f"'labels', 'positives', 'positive_embeddings', and optionally 'tau'")
    if "embeddings" not in data:
        raise ValueError("'FILE' must hold an array 'embeddings'")
    given = [k for k in _KERNEL_KEYS if k in data]
    if len(given) != 1:
        raise ValueError("'FILE' must hold exactly one of 'labels', 'positives', 'positive_embeddings', got "
                         + (", ".join(repr(g) for g in given) if given else "none"))
    return data


def _summary(ds) -> str:
    g = lambda name: float(ds[name])  # noqa: E731
    lines = [f"simkit diagnose: N = {ds.attrs['n_rows']} rows, d = {ds.attrs['dim']}, kernel = {ds.attrs['kernel']}, "
             f"tau = {ds.attrs['tau']:g}, {ds.attrs['n_anchors']} anchors",
             f"  CE = {g('ce'):.6g} ± {g('ce_mcse'):.2g} nats   c1 = {g('c1'):.6g} ± {g('c1_mcse'):.2g}   "
             f"c2 = {g('c2'):.6g} ± {g('c2_mcse'):.2g}",
             f"  slope of log |gap| on log k = {g('slope'):.4g} [{g('slope_ci_low'):.4g}, {g('slope_ci_high'):.4g}] "
             f"(95%; p of slope = -1/2: {g('slope_p_half'):.2g})"]
    if ds.attrs["k"] >= 1:
        measured = (f"; measured gap {g('gap_at_k'):.4g} ± {g('gap_at_k_mcse'):.2g}" if np.isfinite(g("gap_at_k"))
                    else "")
        lines.append(f"  predicted bias at k = {ds.attrs['k']}: {g('bias_at_k'):.4g} nats{measured}")
    kb = g("k_for_bias")
    lines.append(f"  negatives needed for |bias| <= {ds.attrs['eps']:g} nats: k = {int(kb) if np.isfinite(kb) else 'n/a'}")
    if not np.isfinite(g("slope")):
        lines.append(f"  slope not fitted: {ds.attrs.get('slope_note', '')}")
    elif ds.attrs.get("slope_note", "").startswith("fitted to log(-gap)"):
        lines.append("  (slope of log(-gap): the gap is negative over the fit range)")
    if ds.attrs.get("slope_pre_asymptotic"):
        lines.append(f"  warning: pre-asymptotic: the k grid does not reach 16 x the expansion scale "
                     f"({g('expansion_scale'):.4g}); the slope and the 1/k prediction describe larger k")
    if "top1" in ds:
        lines.append(f"  retrieval: top-1 = {g('top1'):.4g} ± {g('top1_mcse'):.2g}, recall@10 = {g('recall10'):.4g} "
                     f"± {g('recall10_mcse'):.2g}")
    return "\n".join(lines)


def _atomic(path: Path, writer) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        writer(tmp)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _write_report(ds, path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.backends.backend_pdf import PdfPages
    from matplotlib.figure import Figure

    k = ds["k"].values.astype(float)
    gap, se = ds["gap"].values, ds["gap_mcse"].values
    ex = ds["gap_exact"].values
    eps = float(ds.attrs["eps"])
    k_for = float(ds["k_for_bias"])
    c1, c2 = float(ds["c1"]), float(ds["c2"])

    def _page1(fig):
        ax = fig.add_axes([0.12, 0.42, 0.8, 0.5])
        pos = gap > 0
        ax.errorbar(k[pos], gap[pos], yerr=2 * se[pos], fmt="o", ms=4, capsize=2, label="Monte Carlo gap ± 2 MCSE")
        if np.any(~pos):
            ax.errorbar(k[~pos], -gap[~pos], yerr=2 * se[~pos], fmt="o", mfc="none", ms=4, capsize=2,
                        label="−gap where the gap < 0 (± 2 MCSE)")
        if np.any(np.isfinite(ex) & (ex > 0)):
            ax.plot(k, np.where(ex > 0, ex, np.nan), "-", lw=1.5, label="exact gap")
        kk = np.geomspace(k[0], max(k[-1], k_for if np.isfinite(k_for) else k[-1]) * 1.5, 200)
        pk = np.abs(c1 / kk + c2 / kk**2)
        ax.plot(kk, np.where(pk > 0, pk, np.nan), "--", lw=1.2, label="|prediction c1/k + c2/k²|")
        ax.axhline(eps, color="0.5", lw=0.8, ls=":", label=f"eps = {eps:g} nats")
        if np.isfinite(k_for):
            ax.axvline(k_for, color="C3", lw=0.8, ls=":", label=f"k for |bias| ≤ eps: {int(k_for)}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        shown = np.abs(np.concatenate([gap, ex]))
        shown = shown[np.isfinite(shown) & (shown > 0)]
        if shown.size:  # the data's range (the prediction can be far off at small k)
            ax.set_ylim(min(shown.min(), eps) / 3, shown.max() * 3)
        ax.set_xlabel("number of negatives k")
        ax.set_ylabel("|gap| = |R_k − log k − CE| (nats)")
        ax.set_title("finite-k InfoNCE bias")
        ax.legend(fontsize=7, loc="lower left")
        txt = [f"How many negatives? |predicted bias| ≤ {eps:g} nats from k = {int(k_for)} on."
               if np.isfinite(k_for) else "How many negatives? (no prediction: c1 is not finite)"]
        if ds.attrs["k"] >= 1:
            gk = float(ds["gap_at_k"])
            txt.append(f"At your k = {ds.attrs['k']}: predicted bias {float(ds['bias_at_k']):.4g} nats"
                       + (f"; measured {gk:.4g} ± {float(ds['gap_at_k_mcse']):.2g}." if np.isfinite(gk) else "."))
        if ds.attrs["slope_pre_asymptotic"]:
            txt.append(f"Warning: pre-asymptotic (the grid stays below 16 × the expansion scale "
                       f"{float(ds['expansion_scale']):.4g}): trust the measured curve there.")
        txt.append(f"c1 = {c1:.5g} ± {float(ds['c1_mcse']):.2g},  c2 = {c2:.5g} ± {float(ds['c2_mcse']):.2g},  "
                   f"CE = {float(ds['ce']):.5g} ± {float(ds['ce_mcse']):.2g} nats")
        txt.append(f"slope of log |gap| on log k (k ≥ {int(float(ds['slope_k_min']))}): {float(ds['slope']):.4g}, "
                   f"95% [{float(ds['slope_ci_low']):.4g}, {float(ds['slope_ci_high']):.4g}]; "
                   f"p(slope = −1/2) = {float(ds['slope_p_half']):.2g}")
        txt.append(f"expansion scale max(E Z2/Z², E m1/Z) = {float(ds['expansion_scale']):.4g}: the prediction "
                   f"holds for k well above it" + (" (slope fit pre-asymptotic)" if ds.attrs['slope_pre_asymptotic']
                                                   else ""))
        if "top1" in ds:
            txt.append(f"retrieval Q vs M: top-1 = {float(ds['top1']):.4g} ± {float(ds['top1_mcse']):.2g}, "
                       f"recall@10 = {float(ds['recall10']):.4g} ± {float(ds['recall10_mcse']):.2g}")
        txt.append(f"N = {ds.attrs['n_rows']}, d = {ds.attrs['dim']}, kernel = {ds.attrs['kernel']}, "
                   f"tau = {ds.attrs['tau']:g}, anchors = {ds.attrs['n_anchors']} "
                   f"(exact curve on {ds.attrs['n_exact_anchors']})")
        for i, line in enumerate(txt):
            fig.text(0.08, 0.32 - 0.035 * i, line, fontsize=8)

    with PdfPages(path) as pdf:
        fig = Figure(figsize=(8.27, 11.69 / 1.6))
        FigureCanvasAgg(fig)
        _page1(fig)
        pdf.savefig(fig)


def run(args) -> int:
    """Run ``simkit diagnose``; returns the exit status (2 on bad input, nothing written then)."""
    from simkit.diagnose import diagnose
    from simkit.runner.storage import ENGINE
    try:
        out = _path("--out", args.out, ".nc")
        report = _path("--report", args.report, ".pdf")
        eps = _float("--eps", args.eps)
        k = None if args.k is None else _int("--k", args.k, 1)
        n_anchors = _int("--n-anchors", args.n_anchors, 2)
        n_tuples = _int("--n-tuples", args.n_tuples, 1)
        seed = _int("--seed", args.seed, 0)
        data = _load(args.file)
        if args.tau is not None:
            tau = _float("--tau", args.tau)
        elif "tau" in data:
            t = data["tau"]
            if t.shape != () or t.dtype.kind not in "iuf":
                raise ValueError(f"'tau' in 'FILE' must be a real scalar, got shape {t.shape} dtype {t.dtype}")
            tau = _float("--tau", str(float(t)))
        else:
            raise ValueError("'--tau' is required (or store a scalar 'tau' in the npz)")
        kernel = next(key for key in _KERNEL_KEYS if key in data)
        ds = diagnose(data["embeddings"], **{kernel: data[kernel]}, tau=tau, k=k, eps=eps, n_anchors=n_anchors,
                      n_tuples=n_tuples, rng=seed)
    except ValueError as exc:
        msg = " ".join(str(exc).split())
        print(f"simkit: error: {msg}", file=sys.stderr)
        return 2
    print(_summary(ds))
    if out is not None:
        _atomic(out, lambda p: ds.to_netcdf(p, engine=ENGINE))
        print(f"simkit: wrote {out}")
    if report is not None:
        _atomic(report, lambda p: _write_report(ds, Path(p)))
        print(f"simkit: wrote {report}")
    return 0
