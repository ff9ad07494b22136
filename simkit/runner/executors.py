"""Executors: where a run's tasks execute. One protocol, two implementations.

An executor's ``run(tasks, fn)`` takes ``(key, args, dep)`` triples — when ``dep`` is the key of an
earlier task, that task's result replaces the last argument — and yields ``(key, result,
exception)`` as tasks finish. A task whose dependency failed yields :class:`DependencyFailed`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

__all__ = ["Executor", "InProcessExecutor", "DependencyFailed", "ExecutorLost"]


class DependencyFailed(Exception):
    """A task was not run because the task it depends on (its cell's preparation) failed."""


class ExecutorLost(RuntimeError):
    """The executor itself failed (e.g. the Dask scheduler went away): no task result can arrive."""


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
        needed = {t[2] for t in tasks if t[2] is not None}
        for key, args, dep in tasks:
            if dep is not None:
                if dep in failed or dep not in results:
                    failed.add(key)
                    yield key, None, DependencyFailed(str(dep))
                    continue
                args = (*args[:-1], results[dep])
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
