"""Reading the inputs of ``simkit diagnose``: ``.npz`` archives and ``.npy`` arrays, checked before loading.

A file is recognised by its first bytes (zip or NumPy signature), not its name. Every array's
header is read first: object arrays (which would need pickle) are refused, and an array whose
header declares more bytes than its file or zip member holds, or more than the machine's memory,
is reported as such instead of being allocated.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

__all__ = ["load_arrays", "load_array"]

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def _memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return 1 << 62


def _header(fp, where: str, option: str, available: int | None):
    """Shape and dtype of the .npy stream ``fp`` (positioned at its start), after the checks."""
    try:
        version = np.lib.format.read_magic(fp)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(fp, max_header_size=1 << 16)
    except Exception as exc:  # ValueError, EOFError, SyntaxError from a corrupt header
        raise ValueError(f"'{option}' has an unreadable NumPy header in {where} "
                         f"({type(exc).__name__})") from None
    if dtype.hasobject:
        raise ValueError(f"'{option}' holds an object array in {where} (it would need pickle, refused): "
                         "save numbers or fixed-width strings")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    available = None if available is None else available - fp.tell()
    if available is not None and declared > available:
        raise ValueError(f"'{option}' is truncated or corrupt: the header of {where} declares shape {shape} "
                         f"{dtype} ({declared} bytes), but only {available} bytes follow")
    if declared > 0.8 * _memory_bytes():
        raise ValueError(f"'{option}' array {where} declares {declared / 2**30:.3g} GiB, more than this "
                         f"machine's memory ({_memory_bytes() / 2**30:.3g} GiB)")
    return shape, dtype


def _kind(path: Path, option: str) -> str:
    if not path.is_file():
        raise ValueError(f"'{option}' does not exist or is not a file: {str(path)!r}")
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise ValueError(f"'{option}' cannot be read ({exc.strerror}): {str(path)!r}") from None
    if head.startswith(_NPY_MAGIC):
        return "npy"
    if head[:4] in _ZIP_MAGIC:
        return "npz"
    raise ValueError(f"'{option}' is neither an .npz archive nor an .npy array (no zip or NumPy signature at "
                     f"its start): {str(path)!r}")


def load_array(text: str, option: str) -> np.ndarray:
    """The array of an ``.npy`` file (for ``--labels`` and the like), checked first."""
    path = Path(text)
    if _kind(path, option) != "npy":
        raise ValueError(f"'{option}' must be an .npy array, got an .npz archive: {text!r}")
    try:
        with open(path, "rb") as fh:
            _header(fh, repr(text), option, path.stat().st_size)
            fh.seek(0)
            return np.load(fh, allow_pickle=False)
    except ValueError as exc:
        if str(exc).startswith(f"'{option}'"):
            raise
        raise ValueError(f"'{option}' is not a readable .npy array ({' '.join(str(exc).split())}): {text!r}") from None
    except (OSError, EOFError, MemoryError) as exc:
        raise ValueError(f"'{option}' could not be loaded ({type(exc).__name__}): {text!r}") from None


def load_arrays(text: str, option: str = "FILE") -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive, or ``{"embeddings": array}`` for an ``.npy`` file."""
    path = Path(text)
    if _kind(path, option) == "npy":
        return {"embeddings": load_array(text, option)}
    try:
        with zipfile.ZipFile(path) as zf:
            out = {}
            for info in zf.infolist():
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                with zf.open(info) as fh:
                    _header(fh, f"{name!r} of {text!r}", option, info.file_size)
                with zf.open(info) as fh:
                    out[name] = np.lib.format.read_array(fh, allow_pickle=False)
            return out
    except ValueError as exc:
        if str(exc).startswith(f"'{option}'"):
            raise
        raise ValueError(f"'{option}' is not a readable npz archive ({' '.join(str(exc).split())}): {text!r}") from None
    except (OSError, zipfile.BadZipFile, EOFError, MemoryError, RuntimeError) as exc:
        raise ValueError(f"'{option}' is not a readable npz archive ({type(exc).__name__}): {text!r}") from None
