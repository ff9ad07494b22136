"""Memory: a study's estimate of its largest task, the memory this process may still use, and the
check that refuses, before any task, a design that cannot fit.

A study that holds large arrays implements :meth:`simkit.runner.Study.peak_memory`, returning a
:class:`PeakMemory`: the bytes its largest task allocates beyond what the process already holds, which
task that is, and the parameters that drive it. :func:`check_memory` compares it with
:func:`available_memory` and raises :class:`InsufficientMemory` (a ValueError: ``simkit run`` prints one
line and exits with status 2) when it does not fit, instead of letting the tasks fail one after another
or the kernel's out-of-memory killer end the run.
"""

from __future__ import annotations

import dataclasses
import resource
from pathlib import Path
from typing import Any

__all__ = ["PeakMemory", "InsufficientMemory", "available_memory", "check_memory", "format_bytes"]


@dataclasses.dataclass(frozen=True)
class PeakMemory:
    """A study's estimate of the memory of the largest task of a design.

    ``bytes``: allocated beyond what the process holds before the task; ``task``: which task that is
    (e.g. "a preparation part of mixture-d16"); ``params``: the design parameters that drive it, as
    ``{name: value}`` (named in the refusal, so that the user knows what to lower with ``--set``).
    """

    bytes: int
    task: str
    params: dict[str, Any]


class InsufficientMemory(ValueError):
    """A design whose largest task needs more memory than this process may use."""


def format_bytes(n: float) -> str:
    """``n`` bytes in GiB (MiB below 1 GiB), two significant decimals."""
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def _proc_bytes(path: str, key: str) -> int | None:
    """The ``key: N kB`` field of a /proc file, in bytes (None where absent or unreadable)."""
    try:
        for line in Path(path).read_text().splitlines():
            name, _, value = line.partition(":")
            if name == key:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _cgroup_room() -> int | None:
    """Memory left under this process's cgroup limit (v2, or v1), None if there is none."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":  # cgroup v2
            base = Path("/sys/fs/cgroup") / parts[2].lstrip("/")
            limit, used = _read_int(str(base / "memory.max")), _read_int(str(base / "memory.current"))
        elif "memory" in parts[1].split(","):  # cgroup v1
            base = Path("/sys/fs/cgroup/memory") / parts[2].lstrip("/")
            limit = _read_int(str(base / "memory.limit_in_bytes"))
            used = _read_int(str(base / "memory.usage_in_bytes"))
        else:
            continue
        if limit is not None and used is not None and limit < 2**60:
            return max(limit - used, 0)
    return None


def _rlimit_room() -> int | None:
    """Room under the soft address-space and data limits (``ulimit -v``, ``ulimit -d``), None if unlimited."""
    rooms = []
    for limit, used in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            rooms.append(max(soft - (_proc_bytes("/proc/self/status", used) or 0), 0))
    return min(rooms) if rooms else None


def available_memory() -> int | None:
    """Bytes this process may still allocate: the smallest of the memory the kernel reports available
    (``MemAvailable``), the room under this process's cgroup limit and under its address-space and data
    limits; None where none of them can be read (not Linux)."""
    known = [v for v in (_proc_bytes("/proc/meminfo", "MemAvailable"), _cgroup_room(), _rlimit_room()) if v is not None]
    return min(known) if known else None


def check_memory(study, cfg: dict, *, available: int | None = None) -> PeakMemory | None:
    """Refuse (InsufficientMemory, one line naming the parameters and the estimate) a design whose
    largest task needs more than ``available`` bytes (default :func:`available_memory`). Returns the
    study's estimate, or None if the study gives none."""
    est = study.peak_memory(cfg)
    if est is None:
        return None
    room = available_memory() if available is None else available
    if room is not None and est.bytes > room:
        given = ", ".join(f"{k}={v}" for k, v in est.params.items())
        raise InsufficientMemory(
            f"the design needs about {format_bytes(est.bytes)} for {est.task} ({given}), more than the "
            f"{format_bytes(room)} this process may use; choose a design that fits with --set")
    return est
