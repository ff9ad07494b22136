"""Dask distributed backend of the study engine (optional extra ``simkit[dask]``).

``run_study(..., executor="tcp://host:8786")`` sends every (cell, stage, block) task to an
existing cluster. Results stream back to the driver as they finish and go through the same
checkpoint files as an in-process run, so an interrupted distributed run resumes (in-process or
on a cluster) and the dataset is identical to a local run with the same seed: a task's output
depends only on its seed, never on the worker that ran it.

Fault handling: Dask reschedules the tasks of a worker that dies (``allowed-failures`` of the
scheduler, 3 by default); a task is checkpointed once, when its first result arrives, so a block
is neither lost nor duplicated. An exception raised by a task is returned to the engine, which
records it in the dataset and goes on.

Batching: a block is often a few milliseconds of work, while each Dask task costs the scheduler,
the worker and the driver about a millisecond of CPU each; on a machine whose cores also run the
scheduler and the driver, that overhead slows the workers down. Consecutive tasks that share a
dependency (or have none) and that nothing depends on (a cell's blocks) are therefore sent as
batches: one Dask task runs several engine tasks one after another and returns each one's result
or exception. ``batch="auto"`` (the default) cuts every such run of n tasks into about
``BATCHES_PER_WORKER`` batches per worker, ``ceil(n / (BATCHES_PER_WORKER * n_workers))`` tasks each,
so that the load still balances; ``batch=1`` sends every task on its own. Results are identical
either way (a task's output depends only on its seed); a batch whose worker dies is run again as
a whole, and its results reach the engine once.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from simkit.runner.executors import DependencyFailed, ExecutorLost, fill_dependencies

__all__ = ["DaskExecutor"]

#: seconds to wait for the scheduler's port to accept a connection
CONNECT_TIMEOUT = 20

#: ``batch="auto"``: batches per worker into which a run of batchable tasks is cut
BATCHES_PER_WORKER = 4


def run_batch(fn: Callable, arg_lists: list[tuple], dep_value: Any = None, has_dep: bool = False) -> list[tuple]:
    """Run ``fn(*args)`` for each of ``arg_lists`` in order (with ``dep_value`` as the last argument
    when ``has_dep``); returns ``(result, None)`` or ``(None, exception)`` per task. An exception
    keeps its traceback as a note, since a traceback does not survive pickling."""
    import traceback
    out = []
    for args in arg_lists:
        if has_dep:
            args = (*args[:-1], dep_value)
        try:
            out.append((fn(*args), None))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:  # returned to the engine, which records it and goes on
            exc.add_note("traceback in the worker:\n" + "".join(traceback.format_exception(exc)))
            out.append((None, exc))
    return out


def plan_batches(tasks: list[tuple], n_workers: int, batch) -> list[tuple[list[int], bool]]:
    """Indices of ``tasks`` grouped into submissions, in order, each with whether it is sent as a
    batch: consecutive tasks with the same single (or no) dependency that no task depends on are
    cut into batches (see the module docstring); every other task is sent on its own. With
    ``batch=1`` nothing is batched."""
    needed = {d for _, _, dep in tasks for d in (dep if isinstance(dep, list) else [dep]) if d is not None}
    runs: list[tuple[list[int], bool]] = []
    for i, (key, _, dep) in enumerate(tasks):
        ok = batch != 1 and key not in needed and not isinstance(dep, list)
        if ok and runs and runs[-1][1] and tasks[runs[-1][0][-1]][2] == dep:
            runs[-1][0].append(i)
        else:
            runs.append(([i], ok))
    groups: list[tuple[list[int], bool]] = []
    for idx, ok in runs:
        if not ok:
            groups.append((idx, False))
            continue
        size = batch if batch != "auto" else -(-len(idx) // (BATCHES_PER_WORKER * max(n_workers, 1)))
        groups.extend((idx[j:j + size], True) for j in range(0, len(idx), size))
    return groups


def _check_address(address: str) -> None:
    """ValueError unless ``address`` parses and its TCP port accepts a connection.

    Checked before a ``Client`` exists: a ``Client`` whose connection failed is left half started,
    and closing two of them at interpreter exit blocks for 40 s each.
    """
    from distributed.comm import get_address_host_port, parse_address
    try:
        scheme, _ = parse_address(address)
        if scheme in ("inproc", "ucx"):  # no TCP port to probe: left to the Client
            return
        if scheme not in ("tcp", "tls", "ws", "wss"):
            raise ValueError(f"unknown address scheme {scheme!r}")
        host, port = get_address_host_port(address)
        if not host or not 0 < port < 65536:
            raise ValueError("host:port with a port in 1..65535 expected")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"'scheduler' {address!r} is not a Dask scheduler address ({exc})") from None
    try:
        socket.create_connection((host.strip("[]"), port), timeout=CONNECT_TIMEOUT).close()
    except (OSError, ValueError) as exc:  # refused, unknown host, timed out, unencodable host
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise ValueError(f"'scheduler' {address!r} is not reachable ({reason})") from None


#: the logger of distributed's batched client-scheduler stream (quietened while an executor lives)
_BATCHED_LOGGER = "distributed.batched"


def _silence(prefix: str) -> dict[str, int]:
    """Silence the loggers under ``prefix`` (each may have its own level); returns their old levels."""
    names = [prefix, *(n for n in logging.root.manager.loggerDict if n.startswith(prefix + "."))]
    old = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    return old


class DaskExecutor:
    """Executor that runs engine tasks on a ``distributed.Client``.

    Parameters
    ----------
    scheduler : str or distributed.Client
        Scheduler address (``tcp://...``) or an existing client (not closed by :meth:`close`).
    batch : "auto" or int >= 1, keyword-only
        Engine tasks per Dask task for a cell's blocks (see the module docstring); default "auto".
    tune_malloc : bool, keyword-only
        Register a worker plugin that sets glibc's malloc thresholds in every worker process
        (:mod:`simkit.runner._malloc`: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536``, which
        made a preparation 2.6x slower); default True. It stays registered on the cluster.
    """

    name = "dask"

    def __init__(self, scheduler, *, batch="auto", tune_malloc=True):
        if batch != "auto" and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
            raise ValueError(f"'batch' must be 'auto' or an int >= 1, got {batch!r}")
        self.batch = batch
        try:
            from distributed import Client
        except ImportError:  # pragma: no cover - the extra is not installed
            raise ValueError("'--scheduler' needs the Dask extra: pip install 'simkit[dask]'") from None
        if isinstance(scheduler, Client):
            self.client, self._own = scheduler, False
        else:
            if not isinstance(scheduler, str) or not scheduler.strip():
                raise ValueError(f"'scheduler' must be a Dask scheduler address, got {scheduler!r}")
            _check_address(scheduler)
            try:
                self.client, self._own = Client(scheduler, timeout=f"{CONNECT_TIMEOUT}s"), True
            except (OSError, TimeoutError) as exc:
                raise ValueError(f"'scheduler' {scheduler!r} is not reachable ({type(exc).__name__})") from None
            except (ValueError, TypeError) as exc:  # malformed: no port, unknown scheme, ...
                raise ValueError(f"'scheduler' {scheduler!r} is not a Dask scheduler address ({exc})") from None
        if tune_malloc:
            from simkit.runner._dask_plugin import MallocTuning
            self.client.register_plugin(MallocTuning())
        # the client's batched stream logs "Batched Comm Closed" with a traceback at INFO when the
        # scheduler goes away, which can reach stderr before the loss is seen here and reported in one
        # line (tests/runner/test_faults.py saw it in 1 run of 6); nothing else is logged there at INFO. Set
        # after the last call that can raise, so that a failed constructor leaves the level as it was
        self._batched_level = logging.getLogger(_BATCHED_LOGGER).level
        logging.getLogger(_BATCHED_LOGGER).setLevel(logging.WARNING)
        self.n_workers = len(self.client.scheduler_info().get("workers", {}))
        self.address = str(getattr(self.client.scheduler, "address", scheduler))
        self._futures: list = []

    def run(self, tasks: list[tuple], fn: Callable) -> Iterable[tuple[Any, Any, BaseException | None]]:
        """Submit ``(key, args, dep)`` tasks; a dependent task gets its dependency's future as its last
        argument (or, for a list ``dep``, a list holding their futures), so Dask starts it as soon as
        those are done (no barrier across cells)."""
        from distributed import as_completed

        tag = uuid.uuid4().hex[:8]
        futures = {}  # future -> the keys of the engine tasks it runs (one, or a batch)
        by_key = {}
        deps = {}
        for group, batched in plan_batches(tasks, self.n_workers, self.batch):
            key, args, dep = tasks[group[0]]
            name = "-".join(map(str, key)) if isinstance(key, tuple) else str(group[0])
            if dep is None:
                dfuts = []
            else:
                dfuts = [by_key[d] for d in (dep if isinstance(dep, list) else [dep]) if d is not None]
            if batched:  # every task of a batch has the same dependency, ``dep``
                fut = self.client.submit(run_batch, fn, [tasks[i][1] for i in group],
                                         by_key[dep] if dep is not None else None, dep is not None,
                                         key=f"simkit-{tag}-{name}+{len(group)}", pure=False)
            else:
                if dep is not None:
                    args = (*args[:-1], fill_dependencies(args[-1], dep, by_key))
                fut = self.client.submit(fn, *args, key=f"simkit-{tag}-{name}", pure=False)
                by_key[key] = fut
            futures[fut] = ([tasks[i][0] for i in group], batched)
            deps[fut] = dfuts
        self._futures = list(futures)
        dep_futures = {f for fs in deps.values() for f in fs}
        for fut in as_completed(futures):
            keys, batched = futures[fut]
            try:
                result = fut.result()
            except (KeyboardInterrupt, SystemExit, GeneratorExit):
                raise
            except BaseException as exc:  # the task raised, its worker failed too often, or the scheduler went
                if fut.status == "cancelled" or self.client.status not in ("running", "connecting"):
                    # nobody cancelled it here: the client lost its scheduler. Its reconnection attempts
                    # would log tracebacks for CONNECT_TIMEOUT s: the one-line error says it all
                    self._lost = True
                    self._log_levels = _silence("distributed")
                    raise ExecutorLost(f"the Dask scheduler {self.address} was lost ({type(exc).__name__})") from None
                failed_dep = any(d.status == "error" for d in deps.get(fut, ()))
                for key in keys:
                    yield key, None, (DependencyFailed(str(exc)) if failed_dep else exc)
            else:
                if batched:
                    for key, (res, err) in zip(keys, result):
                        yield key, res, err
                else:
                    yield keys[0], result, None
            finally:
                if fut not in dep_futures:
                    fut.release()  # results are checkpointed by the engine; keep only what others need

    def close(self) -> None:
        if getattr(self, "_lost", False):  # nothing to cancel, nobody to tell
            self._futures = []
            if self._own:
                try:
                    self.client.close(timeout=2)
                except Exception:  # noqa: BLE001 - the scheduler is gone; the client is discarded
                    pass
            for name, level in self._log_levels.items():
                logging.getLogger(name).setLevel(level)
            logging.getLogger(_BATCHED_LOGGER).setLevel(self._batched_level)
            return
        for fut in self._futures:
            fut.cancel()
        self._futures = []
        if self._own:
            self.client.close()
        logging.getLogger(_BATCHED_LOGGER).setLevel(self._batched_level)
