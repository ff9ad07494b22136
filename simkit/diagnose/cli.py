"""``simkit diagnose FILE [--tau T] [--batch-size B [--symmetric] | --queue K | --k K] [--out X.nc] [--report X.pdf]``.

FILE is an ``.npz`` archive holding the embeddings (``embeddings`` or ``--embeddings-key``) and one of
``labels``, ``positives``, ``positive_embeddings`` (or ``--labels-key`` / ``--positives-key``), and
optionally a scalar ``tau``; or an ``.npy`` array of embeddings with ``--labels FILE.npy``,
``--positives FILE.npy`` or ``--positive-embeddings FILE.npy``. Prints the summary; writes the
dataset (``--out``, netCDF) and the report (``--report``, PDF).

Bad input: one line ``simkit: error: ...`` naming the input, exit status 2, and every check, the
whole diagnosis included, runs before anything is written. A failed write: one line, exit status 1,
and no file of the run left behind (outputs go to temporary files renamed only when all are
written). A progress bar goes to stderr when it is a terminal and the work takes over 2 seconds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from simkit.diagnose._inputs import CONVENTIONS, K_CAP

__all__ = ["add_parser", "run"]

_KERNEL_KEYS = ("labels", "positives", "positive_embeddings")
# library argument -> command-line option, for the messages of simkit.diagnose
_OPTION = {"tau": "--tau", "eps": "--eps", "k": "--k", "k_max": "--k-max", "k_grid": "--k-grid",
           "n_anchors": "--anchors", "n_exact_anchors": "--exact-anchors", "n_tuples": "--n-tuples",
           "batch_size": "--batch-size", "queue": "--queue", "convention": "--convention", "symmetric": "--symmetric",
           "scheme": "--scheme"}


def add_parser(subparsers) -> None:
    """Add the ``diagnose`` sub-command to an argparse sub-parser collection."""
    p = subparsers.add_parser("diagnose", help="finite-k InfoNCE bias of your own embeddings: how many negatives?",
                              description=__doc__.split("\n\n")[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", help=".npz with the embeddings and positives, or .npy of embeddings")
    p.add_argument("--embeddings-key", default="embeddings", help="name of the embeddings in the npz")
    p.add_argument("--labels-key", default=None, help="name of the labels in the npz (default 'labels')")
    p.add_argument("--positives-key", default=None, help="name of the positive row indices in the npz")
    p.add_argument("--labels", default=None, help=".npy of labels (N,)")
    p.add_argument("--positives", default=None, help=".npy of positive row indices (N, m)")
    p.add_argument("--positive-embeddings", default=None, help=".npy of embedded views (N, m, d)")
    p.add_argument("--tau", default=None, help="temperature (default: 'tau' stored in the npz)")
    p.add_argument("--k", default=None, help="number of negatives used in training")
    p.add_argument("--batch-size", default=None, help="training batch size B: k = B - 1 (2B - 2 with --symmetric)")
    p.add_argument("--symmetric", action="store_true", help="symmetric NT-Xent (SimCLR): k = 2B - 2")
    p.add_argument("--scheme", default=None, help="in-batch scheme with --batch-size: ntxent (k = 2B - 2) or clip "
                   "(k = B - 1); its own constant c1 (default ntxent with --symmetric, else clip)")
    p.add_argument("--queue", default=None, help="MoCo queue length K: k = K")
    p.add_argument("--eps", default="0.01", help="tolerated |bias| in nats (default 0.01)")
    p.add_argument("--convention", default="exclude-anchor", help="exclude-anchor (default), include-anchor, "
                   "exclude-same-label")
    p.add_argument("--k-max", default=None, help="largest k of the exact curve (default 2^20)")
    p.add_argument("--k-grid", default=None, help="comma-separated k values tabulated in --out")
    p.add_argument("--anchors", default="2048", help="anchors for CE, c1, c2 and retrieval (default 2048)")
    p.add_argument("--exact-anchors", default=None, help="anchors of the exact curve (default: a budget of 3e9 atom-node evaluations)")
    p.add_argument("--n-tuples", default=str(1 << 15), help="Monte Carlo InfoNCE tuples (default 32768)")
    p.add_argument("--mc-k-max", default="1024", help="largest k of the Monte Carlo gap (default 1024)")
    p.add_argument("--seed", default="0", help="seed of the anchor samples and Monte Carlo (default 0)")
    p.add_argument("--out", default=None, help="write the dataset here (.nc)")
    p.add_argument("--report", default=None, help="write the PDF report here (.pdf)")


def _float(option: str, text: str) -> float:
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"'{option}' must be a number, got {text!r}") from None
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"'{option}' must be a finite number > 0, got {text!r}")
    return v


def _int(option: str, text: str | None, low: int, high: int = K_CAP) -> int | None:
    if text is None:
        return None
    try:
        v = float(text) if any(c in str(text) for c in ".eE") else int(text)
    except (TypeError, ValueError):
        raise ValueError(f"'{option}' must be an integer, got {text!r}") from None
    if not np.isfinite(v) or v != int(v) or v < low or v > high:
        raise ValueError(f"'{option}' must be an integer in [{low}, {high}], got {text!r}")
    return int(v)


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


def _inputs(args) -> tuple[np.ndarray, str, np.ndarray, dict]:
    from simkit.diagnose.io import load_array, load_arrays
    data = load_arrays(args.file)
    emb_key = args.embeddings_key
    if emb_key not in data:
        raise ValueError(f"'FILE' has no array {emb_key!r} (it holds {', '.join(repr(k) for k in data) or 'none'}): "
                         "name the embeddings with --embeddings-key")
    extra = {}
    files = {"labels": args.labels, "positives": args.positives, "positive_embeddings": args.positive_embeddings}
    for kind, text in files.items():
        if text is not None:
            extra[kind] = load_array(text, "--" + kind.replace("_", "-"))
    for kind, key in (("labels", args.labels_key), ("positives", args.positives_key)):
        if key is not None:
            if key not in data:
                raise ValueError(f"'--{kind}-key' names {key!r}, which 'FILE' does not hold "
                                 f"(it holds {', '.join(repr(k) for k in data)})")
            extra[kind] = data[key]
    if not extra:
        extra = {kind: data[kind] for kind in _KERNEL_KEYS if kind in data and kind != emb_key}
    if len(extra) != 1:
        raise ValueError("exactly one of labels, positives, positive_embeddings must be given (in 'FILE', by "
                         "--labels-key/--positives-key, or by --labels/--positives/--positive-embeddings), got "
                         + (", ".join(extra) if extra else "none"))
    kind, arr = next(iter(extra.items()))
    return data[emb_key], kind, arr, data


class _Progress:
    """A one-line bar on stderr, shown once the work has taken 2 s, only when stderr is a terminal."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.shown = False
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.enabled or time.monotonic() - self.t0 < 2.0:
            return
        width = 30
        fill = int(width * done / max(total, 1))
        self.stream.write(f"\r{stage:<12} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def _write_netcdf(dg, path: str) -> None:
    from simkit.runner.storage import ENGINE
    dg.to_xarray().to_netcdf(path, engine=ENGINE)


def _write_pdf(dg, path: str) -> None:
    dg.to_pdf(path)


def _write_all(dg, targets: list[tuple[str, Path, object]]) -> None:
    """Write every output to a temporary file beside it, then rename them all; on failure remove
    every temporary (and any output already renamed) and re-raise."""
    temps, done = [], []
    try:
        for _, path, writer in targets:
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=str(path.parent))
            os.close(fd)
            temps.append(tmp)
            writer(dg, tmp)
            os.chmod(tmp, 0o666 & ~_umask())
        for (_, path, _), tmp in zip(targets, temps):
            os.replace(tmp, path)
            done.append(path)
    except BaseException:
        for tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for path in done:
            if path.exists():
                path.unlink()
        raise


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _cli_message(exc: Exception) -> str:
    msg = " ".join(str(exc).split())
    for name, option in _OPTION.items():
        if msg.startswith(f"'{name}'"):
            return f"'{option}'" + msg[len(name) + 2:]
    return msg


def run(args) -> int:
    """Run ``simkit diagnose``; returns the exit status (2 on bad input, 1 on a failed write)."""
    from simkit.diagnose import diagnose
    progress = _Progress()
    try:
        out = _path("--out", args.out, ".nc")
        report = _path("--report", args.report, ".pdf")
        eps = _float("--eps", args.eps)
        k = _int("--k", args.k, 1)
        batch = _int("--batch-size", args.batch_size, 2, K_CAP // 2)
        queue = _int("--queue", args.queue, 1)
        k_max = _int("--k-max", args.k_max, 16)
        n_anchors = _int("--anchors", args.anchors, 2)
        n_exact = _int("--exact-anchors", args.exact_anchors, 1)
        n_tuples = _int("--n-tuples", args.n_tuples, 1, 1 << 30)
        mc_k_max = _int("--mc-k-max", args.mc_k_max, 1, 1 << 20)
        seed = _int("--seed", args.seed, 0, 2**63)
        convention = args.convention.replace("-", "_")
        if convention not in CONVENTIONS:
            raise ValueError(f"'--convention' must be one of {', '.join(c.replace('_', '-') for c in CONVENTIONS)}, "
                             f"got {args.convention!r}")
        k_grid = None
        if args.k_grid is not None:
            k_grid = [_int("--k-grid", part.strip(), 1) for part in args.k_grid.split(",") if part.strip()]
            if not k_grid:
                raise ValueError(f"'--k-grid' must be comma-separated integers, got {args.k_grid!r}")
        emb, kind, arr, data = _inputs(args)
        if args.tau is not None:
            tau = _float("--tau", args.tau)
        elif "tau" in data:
            t = data["tau"]
            if t.shape != () or t.dtype.kind not in "iuf":
                raise ValueError(f"'tau' in 'FILE' must be a real scalar, got shape {t.shape} dtype {t.dtype}")
            tau = _float("--tau", str(float(t)))
        else:
            raise ValueError("'--tau' is required (or store a scalar 'tau' in the npz)")
        dg = diagnose(emb, **{kind: arr}, tau=tau, k=k, batch_size=batch, symmetric=args.symmetric,
                      scheme=args.scheme, queue=queue,
                      eps=eps, convention=convention, k_max=k_max, k_grid=k_grid, n_anchors=n_anchors,
                      n_exact_anchors=n_exact, n_tuples=n_tuples, mc_k_max=mc_k_max, rng=seed, progress=progress)
        text = dg.summary()
    except (ValueError, MemoryError) as exc:
        progress.close()
        msg = _cli_message(exc) if isinstance(exc, ValueError) else "the inputs do not fit in memory"
        print(f"simkit: error: {msg}", file=sys.stderr)
        return 2
    progress.close()
    print(text)
    targets = [(opt, p, w) for opt, p, w in (("--out", out, _write_netcdf), ("--report", report, _write_pdf))
               if p is not None]
    if targets:
        try:
            _write_all(dg, targets)
        except (OSError, RuntimeError) as exc:
            what = getattr(exc, "strerror", None) or " ".join(str(exc).split()) or type(exc).__name__
            names = " and ".join(f"{opt} {str(p)!r}" for opt, p, _ in targets)
            print(f"simkit: error: could not write {names} ({what}); nothing was written", file=sys.stderr)
            return 1
        for opt, p, _ in targets:
            print(f"simkit: wrote {p}")
    return 0
