"""Executors: where a run's tasks execute. One protocol, two implementations.

An executor's ``run(tasks, fn)`` takes ``(key, args, dep)`` triples — when ``dep`` is the key of an
earlier task, that task's result replaces the last argument; when ``dep`` is a list, the last
argument is a list of the same length and each non-None entry of ``dep`` (the key of an earlier
task) replaces the entry at its position by that task's result — and yields ``(key, result,
exception)`` as tasks finish. A task any of whose dependencies failed yields :class:`DependencyFailed`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["Executor", "InProcessExecutor", "DependencyFailed", "ExecutorLost", "fill_dependencies"]


def fill_dependencies(last, dep, results) -> Any:
    """The last argument of a task with dependency ``dep``: ``results[dep]`` for one key; for a list,
    ``last`` (a list as long) with each position whose ``dep`` entry is a key replaced by its result."""
    if not isinstance(dep, list):
        return results[dep]
    if not isinstance(last, list) or len(last) != len(dep):
        raise ValueError("a list dependency needs a list last argument of the same length")
    return [v if d is None else results[d] for v, d in zip(last, dep)]


class DependencyFailed(Exception):
    """A task was not run because the task it depends on (its cell's preparation) failed."""


class ExecutorLost(RuntimeError):
    """The executor itself failed (e.g. the Dask scheduler went away): no task result can arrive."""


class SummaryFailed(RuntimeError):
    """A study's summary raised on a run whose tasks had failed (say, every cell's preparation), so
    that what it needs is missing: the run ends with one line and keeps every finished task."""


class Executor(Protocol):
    name: str
    n_workers: int

    def run(self, tasks: list[tuple], fn: Callable) -> Iterable[tuple[Any, Any, BaseException | None]]: ...

    def close(self) -> None: ...


class InProcessExecutor:
    """Runs tasks one after another in this process (each task uses all cores via Numba)."""

    name = "in-process"
    n_workers = 1

    def run(self, tasks: list[tuple], fn: Callable) -> Iterable[tuple[Any, Any, BaseException | None]]:
        results: dict = {}
        failed: set = set()
        needed = {d for t in tasks for d in (t[2] if isinstance(t[2], list) else [t[2]]) if d is not None}
        for key, args, dep in tasks:
            if dep is not None:
                dkeys = [d for d in dep if d is not None] if isinstance(dep, list) else [dep]
                lost = [d for d in dkeys if d in failed or d not in results]
                if lost:
                    failed.add(key)
                    yield key, None, DependencyFailed(str(lost[0]))
                    continue
                args = (*args[:-1], fill_dependencies(args[-1], dep, results))
            try:
                result = fn(*args)
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as exc:  # recorded, the run goes on
                failed.add(key)
                yield key, None, exc
            else:
                if key in needed:
                    results[key] = result
                yield key, result, None

    def close(self) -> None:
        pass
