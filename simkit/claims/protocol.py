"""Pre-registered analysis plans (``protocols/<study>.md``): provenance and analysis labels.

A confirmatory verdict rule is written down in a protocol and committed, in its own commit, before
the run whose dataset it judges. A study records in its dataset the protocol's path, the SHA-256 of
its bytes and the commit that last touched it (:func:`protocol_attrs`); a :class:`~simkit.runner.Check`
names its protocol (``Check(protocol="protocols/<study>.md")``), and :func:`analysis_label` says
whether a row computed from a dataset is *confirmatory* -- the dataset is a full-design run of that
protocol and the protocol file still has the hash recorded in it -- or *exploratory* (everything
else: checks without a protocol, quick designs, a protocol edited after its run, a run from a
modified work tree: its ``git_commit`` ends in "-dirty", so the commit alone does not say what ran).
``simkit run`` refuses a confirmatory design on a modified work tree (:func:`confirmatory_protocols`).
``tests/claims/test_protocols.py`` checks every committed dataset that names a protocol: its hash matches
the file, and the protocol commit is the dataset's ``git_commit`` or an ancestor of it.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import xarray as xr

__all__ = ["REPO_ROOT", "protocol_attrs", "protocol_sha256", "analysis_label", "label_protocol", "is_confirmatory",
           "confirmatory_protocols", "recorded_protocols"]

#: the checkout that holds ``protocols/`` (simkit is installed editable from it)
REPO_ROOT = Path(__file__).resolve().parents[2]


def protocol_sha256(path: str, root: Path | None = None) -> str | None:
    """SHA-256 of the protocol file's bytes, ``None`` when it does not exist."""
    f = (REPO_ROOT if root is None else Path(root)) / path
    return hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else None


def protocol_attrs(path: str, root: Path | None = None, prefix: str = "protocol") -> dict[str, str]:
    """``protocol_path``, ``protocol_sha256`` and ``protocol_commit`` (the last commit touching the
    file, ``git log -1 --format=%H -- path``; "uncommitted", "absent" or "unknown" otherwise) for a
    dataset's global attributes; a dataset judged by a second protocol records it under another
    ``prefix`` starting with "protocol" (e.g. ``protocol_scaled_path``)."""
    if not prefix.startswith("protocol"):
        raise ValueError(f"'prefix' must start with 'protocol', got {prefix!r}")
    return {f"{prefix}_{k}": v for k, v in _protocol_attrs(path, root).items()}


def recorded_protocols(attrs: dict) -> dict[str, str]:
    """The protocols a dataset's attributes record: path -> attribute prefix (see :func:`protocol_attrs`)."""
    return {str(v): k[:-len("_path")] for k, v in attrs.items() if k.startswith("protocol") and k.endswith("_path")}


def _protocol_attrs(path: str, root: Path | None) -> dict[str, str]:
    root = REPO_ROOT if root is None else Path(root)
    sha = protocol_sha256(path, root)
    if sha is None:
        return {"path": path, "sha256": "absent", "commit": "absent"}
    try:
        out = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%H", "--", path],
                             capture_output=True, text=True, timeout=10)
        commit = out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "uncommitted"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    return {"path": path, "sha256": sha, "commit": commit}


def _quick(ds: xr.Dataset) -> bool:
    try:
        return bool(json.loads(str(ds.attrs.get("config", "{}"))).get("quick", False))
    except (ValueError, AttributeError):
        return True  # an unreadable configuration is never confirmatory


def _dirty(ds: xr.Dataset) -> bool:
    return str(ds.attrs.get("git_commit", "unknown")).endswith("-dirty")


def is_confirmatory(ds: xr.Dataset, protocol: str | None, root: Path | None = None) -> bool:
    """True when ``ds`` is a full-design run of ``protocol`` whose file still has the recorded hash,
    run from an unmodified work tree."""
    prefix = recorded_protocols(ds.attrs).get(str(protocol))
    if not protocol or prefix is None or _quick(ds) or _dirty(ds):
        return False
    sha = protocol_sha256(protocol, root)
    return sha is not None and ds.attrs.get(f"{prefix}_sha256") == sha


def analysis_label(ds: xr.Dataset, protocol: str | None, root: Path | None = None) -> str:
    """``"confirmatory (<path>, sha256 <first 12 hex>)"``, or ``"exploratory"`` (with the reason when the
    dataset is a full-design run of the protocol from a modified work tree)."""
    if is_confirmatory(ds, protocol, root):
        prefix = recorded_protocols(ds.attrs)[str(protocol)]
        return f"confirmatory ({protocol}, sha256 {str(ds.attrs[f'{prefix}_sha256'])[:12]})"
    if protocol and str(protocol) in recorded_protocols(ds.attrs) and not _quick(ds) and _dirty(ds):
        return f"exploratory (the {protocol} design run from a modified work tree)"
    return "exploratory"


def label_protocol(label: str) -> tuple[str, str] | None:
    """``(path, "sha256 <first 12 hex>")`` of an :func:`analysis_label` that is confirmatory, else None."""
    if not str(label).startswith("confirmatory ("):
        return None
    path, _, sha = str(label)[len("confirmatory ("):].rstrip(")").partition(", ")
    return path, sha


def confirmatory_protocols(study, cfg: dict) -> list[str]:
    """The protocols a run of ``study`` at ``cfg`` would be confirmatory for: the paths its dataset
    would record (:func:`recorded_protocols`, :func:`is_confirmatory`), none for a quick design."""
    if cfg.get("quick"):
        return []
    return [p for p in recorded_protocols(study.attrs(cfg)) if p]
