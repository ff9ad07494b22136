"""The Dask distributed backend (simkit.runner.dask) on a real ``LocalCluster`` of worker processes.

Determinism across engines and worker counts (bit for bit, ``results_identical``), resumption
that mixes engines, a task that raises on a worker, a worker process killed with SIGKILL in the
middle of a run, and the command line with ``--scheduler``. Skipped when ``distributed`` is not
installed. No statistical assertions here: every check is exact.

Cost: two clusters (1 and 2 worker processes, one thread each) are started once for the module;
the design has 2 x (1 + 12) tasks of ~10 ms, so the time goes into starting processes (~1 min
in all on 2 busy cores).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import cloudpickle  # noqa: E402  (a dependency of distributed)
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402
from distributed.diagnostics.plugin import WorkerPlugin  # noqa: E402

import simkit  # noqa: E402
from simkit import runner as engine  # noqa: E402
from simkit.runner import (cell_key, read_dataset, resolve_config, results_identical, run_study,  # noqa: E402
                           task_name, task_seed)
from studies.rate_k import STUDY  # noqa: E402

# worker processes cannot import this test module: ship the worker plugin below by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SEED = 20261207
DESIGN = {"settings": "uniform-d3,vmf-d8", "k_max": 1024, "n_blocks": 12, "block_anchors": 128, "pilot_blocks": 1}
N_BLOCKS = DESIGN["n_blocks"]
N_TASKS = 2 * (1 + N_BLOCKS)
REPO_ROOT = Path(simkit.__file__).resolve().parent.parent


def _cfg():
    return resolve_config(STUDY, dict(DESIGN), seed=SEED)


def _partial_dirs(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.*.partial"))


def _expected_task_names() -> set[str]:
    cells = STUDY.cells(_cfg())
    return ({task_name("rate_k", c, 0, 0) for c in cells}
            | {task_name("rate_k", c, 1, b) for c in cells for b in range(N_BLOCKS)})


def _engine_tasks(stream) -> int:
    """Engine tasks run in a task stream: a batch (key ``...-<first task>+<n>``) counts n."""
    keys = [str(t["key"]) for t in stream.data if str(t["key"]).startswith("simkit-")]
    return sum(int(k.rsplit("+", 1)[1]) if "+" in k else 1 for k in keys)


def _assert_identical(a, b) -> None:
    """``results_identical(a, b)``, naming what differs when it fails."""
    if results_identical(a, b):
        return
    attrs = sorted(k for k in set(a.attrs) | set(b.attrs)
                   if k not in engine.VOLATILE_ATTRS and str(a.attrs.get(k)) != str(b.attrs.get(k)))
    names = sorted(v for v in set(a.variables) | set(b.variables)
                   if v not in a.variables or v not in b.variables or not a[v].identical(b[v]))
    # (git_commit differs when someone commits to a shared checkout during the test run)
    raise AssertionError(f"datasets differ: attributes {attrs}, variables {names}")


def _start_cluster(n_workers: int) -> LocalCluster:
    # NUMBA_NUM_THREADS=1: one thread per worker process, as docs/scaling.md recommends; the
    # in-process reference uses every core, so the comparisons also cover the thread count
    # (the scheduler serves HTTP even without a dashboard, by default on port 8787 of every
    # interface: keep it on a free local port instead)
    return LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1, host="127.0.0.1",
                        dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                        env={"NUMBA_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def cluster1():
    with _start_cluster(1) as cluster, Client(cluster) as client:
        yield cluster, client


@pytest.fixture(scope="module")
def cluster2():
    with _start_cluster(2) as cluster, Client(cluster) as client:
        yield cluster, client


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The design run in-process, uninterrupted."""
    res = run_study(STUDY, _cfg(), tmp_path_factory.mktemp("reference") / "rate_k.nc", progress=False)
    assert res.completed and not res.errors and res.n_done == N_TASKS
    assert res.dataset.attrs["engine"] == "in-process"
    return res.dataset


class _PatchRateK(WorkerPlugin):
    """Wraps rate_k's block stage in every worker process (present and restarted ones): sleep
    ``delay`` seconds first, or raise for block ``fail = (setting, block)``. The driver's copy of
    the study is untouched, and the wrapped stage returns exactly what the real one returns."""

    def __init__(self, delay: float = 0.0, fail: tuple[str, int] | None = None):
        self.delay, self.fail = delay, fail

    def setup(self, worker):
        import studies.rate_k as module
        study, real = module.STUDY, type(module.STUDY).generate
        delay, fail = self.delay, self.fail

        def generate(cell, cfg, prep, rng):
            if fail is not None and (cell["setting"], rng.bit_generator.seed_seq.spawn_key[-1]) == tuple(fail):
                raise RuntimeError(f"injected failure in worker process {os.getpid()}")
            time.sleep(delay)
            return real(study, cell, cfg, prep, rng)

        study.generate = generate  # an instance attribute shadows the class's method

    def teardown(self, worker):
        import studies.rate_k as module
        module.STUDY.__dict__.pop("generate", None)


class _patched_workers:
    """Context manager: ``_PatchRateK(**kw)`` registered on the cluster of ``client``."""

    name = "simkit-test-patch-rate-k"

    def __init__(self, client, **kw):
        self.client, self.plugin = client, _PatchRateK(**kw)

    def __enter__(self):
        self.client.register_plugin(self.plugin, name=self.name)
        return self

    def __exit__(self, *exc):
        self.client.unregister_worker_plugin(self.name)


# ----------------------------------------------------------------------------------------------
# determinism


# one worker is the slow variant (the two-worker cluster is the scale-out case and runs by default)
@pytest.mark.parametrize("n_workers", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_identical_to_in_process(reference, request, tmp_path, n_workers):
    cluster, client = request.getfixturevalue(f"cluster{n_workers}")
    assert client.run(lambda: __import__("numba").get_num_threads()) == dict.fromkeys(client.run(os.getpid), 1)
    out = tmp_path / "rate_k.nc"
    with get_task_stream(client) as stream:
        res = run_study(STUDY, _cfg(), out, scheduler=cluster.scheduler_address, progress=False)
    assert res.completed and not res.errors and res.n_done == N_TASKS
    assert res.dataset.attrs["engine"] == "dask" and res.dataset.attrs["n_workers"] == n_workers
    _assert_identical(reference, res.dataset)
    _assert_identical(reference, read_dataset(out))  # and through the file
    # bit for bit: every variable, including the raw blocks (results_identical covers it; spelt out)
    for name in ("raw_gap_cv", "raw_ell_inf", "prep_coef", "gap", "slope", "c1_estimate"):
        np.testing.assert_array_equal(res.dataset[name].values, reference[name].values)
    simkit_tasks = [t for t in stream.data if str(t["key"]).startswith("simkit-")]
    assert _engine_tasks(stream) == N_TASKS  # each task ran once
    # the blocks went in batches: ceil(12 / (4 n_workers)) blocks each, every preparation alone
    size = -(-N_BLOCKS // (4 * n_workers))
    assert len(simkit_tasks) == 2 * (1 + -(-N_BLOCKS // size))
    assert len({t["worker"] for t in simkit_tasks}) == n_workers  # on every worker
    assert sorted(os.listdir(tmp_path)) == ["rate_k.nc"]


def test_unbatched_is_identical(reference, cluster2, tmp_path):
    """``DaskExecutor(batch=1)``: every block its own Dask task, the same dataset as batches give."""
    from simkit.runner.dask import DaskExecutor
    _, client = cluster2
    with get_task_stream(client) as stream:
        res = run_study(STUDY, _cfg(), tmp_path / "rate_k.nc", executor=DaskExecutor(client, batch=1), progress=False)
    assert res.completed and not res.errors
    _assert_identical(reference, res.dataset)
    keys = [str(t["key"]) for t in stream.data if str(t["key"]).startswith("simkit-")]
    assert len(keys) == N_TASKS and not any("+" in k for k in keys)


def test_plan_batches():
    """The grouping rule: runs of same-dependency tasks nothing depends on, cut into
    ceil(n / (4 n_workers)) tasks; preparations, parts and list dependencies alone; order kept."""
    from simkit.runner.dask import plan_batches
    prep = ("prepare", 0, 0)
    tasks = [(prep, (), None), (("part", 1, 0), (), None), (("prepare", 1, 0), (), [("part", 1, 0)])]
    tasks += [(("block", 0, b), (), prep) for b in range(10)]
    tasks += [(("block", 1, b), (), ("prepare", 1, 0)) for b in range(3)]
    tasks += [(("block", 2, b), (), None) for b in range(2)]
    groups = plan_batches(tasks, 2, "auto")
    # 10 blocks of cell 0 in batches of ceil(10 / 8) = 2; 3 of cell 1 and 2 of cell 2 one by one
    assert [g for g, _ in groups] == [[0], [1], [2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12], [13], [14], [15],
                                      [16], [17]]
    assert [b for _, b in groups] == [False] * 3 + [True] * 10
    assert [g for g, _ in plan_batches(tasks, 1, 4)][3:6] == [[3, 4, 5, 6], [7, 8, 9, 10], [11, 12]]
    assert all(len(g) == 1 and not b for g, b in plan_batches(tasks, 2, 1))
    assert [i for g, _ in plan_batches(tasks, 64, "auto") for i in g] == list(range(len(tasks)))
    for bad in (0, -1, 1.5, True, "many"):
        with pytest.raises(ValueError, match="'batch' must be 'auto' or an int >= 1"):
            from simkit.runner.dask import DaskExecutor
            DaskExecutor("tcp://127.0.0.1:1", batch=bad)


@pytest.mark.parametrize("first, then, stop_after", [("in-process", "dask", 4),
                                                     pytest.param("dask", "in-process", 9, marks=pytest.mark.slow)])
def test_resume_mixing_engines(reference, cluster2, tmp_path, capsys, first, then, stop_after):
    """Interrupt a run on one engine (``stop_after`` finished tasks: the 2 preparations and some
    blocks) and finish it on the other: the same dataset as an uninterrupted in-process run."""
    cluster, _ = cluster2
    engines = {"in-process": None, "dask": cluster.scheduler_address}
    out = tmp_path / "rate_k.nc"
    res = run_study(STUDY, _cfg(), out, scheduler=engines[first], progress=False, stop_after=stop_after)
    assert not res.completed and res.n_done == stop_after and not out.exists()
    assert "interrupted" in capsys.readouterr().err
    (partial,) = _partial_dirs(out)
    assert len(list(partial.glob("*.npz"))) == stop_after
    res = run_study(STUDY, _cfg(), out, scheduler=engines[then], progress=False)
    assert res.completed and not res.errors
    assert res.dataset.attrs["engine"] == then and res.dataset.attrs["resumed_tasks"] == stop_after
    _assert_identical(reference, res.dataset)
    assert sorted(os.listdir(tmp_path)) == ["rate_k.nc"]


SPLIT = {"settings": "vmf-d8,mixture-d16", "k_max": 256, "n_blocks": 8, "block_anchors": 64, "pilot_blocks": 1,
         "n_mc": 1024, "prep_parts": 4}
N_SPLIT_TASKS = (1 + 8) + (4 + 1 + 8)


def test_split_preparation_is_identical_on_two_workers_and_resumes_across_engines(cluster2, tmp_path, capsys):
    """A mixture cell prepared in 4 part tasks and a combining task: the same dataset
    in-process and on 2 workers, every part run once; a run
    interrupted inside the parts in-process and finished on the cluster gives it too."""
    cluster, client = cluster2
    cfg = resolve_config(STUDY, dict(SPLIT), seed=SEED)
    ref = run_study(STUDY, cfg, tmp_path / "ref" / "rate_k.nc", progress=False)
    assert ref.completed and not ref.errors and ref.n_done == N_SPLIT_TASKS
    out = tmp_path / "dask" / "rate_k.nc"
    with get_task_stream(client) as stream:
        res = run_study(STUDY, cfg, out, scheduler=cluster.scheduler_address, progress=False)
    assert res.completed and not res.errors and res.n_done == N_SPLIT_TASKS
    _assert_identical(ref.dataset, res.dataset)
    tasks = [t for t in stream.data if str(t["key"]).startswith("simkit-")]
    assert _engine_tasks(stream) == N_SPLIT_TASKS
    # each part ran once (which worker runs it is Dask's choice: one worker may take all four)
    assert len([t for t in tasks if str(t["key"]).split("-")[2] == "part"]) == 4
    out = tmp_path / "mixed" / "rate_k.nc"
    res = run_study(STUDY, cfg, out, progress=False, stop_after=3)  # vmf-d8's preparation and 2 parts
    assert not res.completed and "interrupted" in capsys.readouterr().err
    res = run_study(STUDY, cfg, out, scheduler=cluster.scheduler_address, progress=False)
    assert res.completed and res.dataset.attrs["resumed_tasks"] == 3
    _assert_identical(ref.dataset, res.dataset)


# ----------------------------------------------------------------------------------------------
# faults


def test_task_raising_on_a_worker_is_recorded_and_a_rerun_completes(reference, cluster2, tmp_path):
    """Block 3 of vmf-d8 raises in a worker process: the run goes on, the error is recorded with
    its seed, spawn key and cell; running again retries that block alone and gives the reference."""
    cluster, client = cluster2
    cfg, out = _cfg(), tmp_path / "rate_k.nc"
    cells = STUDY.cells(cfg)
    with _patched_workers(client, fail=("vmf-d8", 3)):
        res = run_study(STUDY, cfg, out, scheduler=cluster.scheduler_address, progress=False)
    assert res.completed and len(res.errors) == 1 and res.n_done == N_TASKS - 1
    ds = read_dataset(out)
    (err,) = json.loads(ds.attrs["errors"])
    assert err["seed"] == SEED and err["spawn_key"] == [*cell_key("rate_k", cells[1]), 1, 3]
    assert err["spawn_key"] == list(task_seed(SEED, "rate_k", cells[1], 1, 3).spawn_key)
    assert err["cell"] == cells[1] and err["cell_index"] == 1 and err["stage"] == "block" and err["block"] == 3
    pid = int(re.search(r"RuntimeError: injected failure in worker process (\d+)", err["error"]).group(1))
    # it ran in a batch with block 2, which succeeded; its traceback came back with it
    tb = res.errors[0]["traceback"]
    assert "traceback in the worker" in tb and "in generate" in tb
    assert pid in client.run(os.getpid).values() and pid != os.getpid()  # it was raised remotely
    assert ds.attrs["n_errors"] == 1 and ds["cell_error"].values[0] == ""
    assert re.search(r"block 3: RuntimeError: injected failure", ds["cell_error"].values[1])
    # everything else is the reference, bit for bit
    np.testing.assert_array_equal(ds["raw_gap_cv"].values[0], reference["raw_gap_cv"].values[0])
    ok = np.arange(N_BLOCKS) != 3
    np.testing.assert_array_equal(ds["raw_gap_cv"].values[1, ok], reference["raw_gap_cv"].values[1, ok])
    assert np.all(np.isnan(ds["raw_gap_cv"].values[1, 3]))
    (partial,) = _partial_dirs(out)  # kept, so that a re-run retries the failed task only
    assert len(list(partial.glob("*.npz"))) == N_TASKS - 1

    res = run_study(STUDY, cfg, out, scheduler=cluster.scheduler_address, progress=False)
    assert res.completed and not res.errors and res.dataset.attrs["resumed_tasks"] == N_TASKS - 1
    _assert_identical(reference, res.dataset)
    assert _partial_dirs(out) == []


def _cli(*args):
    exe = Path(sys.executable).parent / "simkit"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "simkit.cli"]
    return [*cmd, *args]


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))


def test_cli_scheduler(reference, cluster2, tmp_path):
    cluster, _ = cluster2
    sets = [a for k, v in DESIGN.items() for a in ("--set", f"{k}={v}")]
    out = tmp_path / "rate_k.nc"
    res = subprocess.run(_cli("run", "rate_k", "--scheduler", cluster.scheduler_address, *sets, "--seed", str(SEED),
                              "--out", str(out), "--no-report", "--no-progress"),
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"wrote {out} ({N_TASKS}/{N_TASKS} tasks" in res.stdout
    ds = read_dataset(out)
    assert ds.attrs["engine"] == "dask" and ds.attrs["n_workers"] == 2
    _assert_identical(reference, ds)
    assert sorted(os.listdir(tmp_path)) == ["rate_k.nc"]


KILL_AFTER = 2 + 4  # checkpointed tasks (the preparations and 4 blocks) before the kill
DELAY = 0.4  # seconds added to every block in the workers, so that the kill lands mid-run


def test_worker_killed_mid_run(reference, cluster2, tmp_path, monkeypatch):
    """SIGKILL a worker process while it runs a block: Dask reruns its tasks elsewhere (the nanny
    restarts it) and the dataset is the reference; every task is checkpointed exactly once."""
    cluster, client = cluster2
    out = tmp_path / "rate_k.nc"
    saves: dict[str, int] = {}
    real_save = engine.Checkpoint.save

    def counting_save(self, name, data):
        saves[name] = saves.get(name, 0) + 1
        real_save(self, name, data)

    monkeypatch.setattr(engine.Checkpoint, "save", counting_save)
    result: dict = {}

    def target():
        try:
            result["run"] = run_study(STUDY, _cfg(), out, scheduler=cluster.scheduler_address, progress=False,
                                      keep_checkpoint=True)
        except BaseException as exc:  # pragma: no cover - reported below
            result["error"] = exc

    with _patched_workers(client, delay=DELAY), get_task_stream(client) as stream:
        pids = client.run(os.getpid)
        thread = threading.Thread(target=target, daemon=True)
        thread.start()
        deadline, n_done = time.monotonic() + 180, 0
        while time.monotonic() < deadline and thread.is_alive():
            dirs = _partial_dirs(out)
            n_done = len([p for p in dirs[0].glob("*.npz") if not p.name.startswith(".")]) if dirs else 0
            if n_done >= KILL_AFTER:
                break
            time.sleep(0.01)
        assert thread.is_alive() and KILL_AFTER <= n_done < N_TASKS, (n_done, result)
        busy = {w: keys for w, keys in client.processing().items() if keys}
        victim = sorted(busy)[0]
        in_flight = set(busy[victim])
        os.kill(pids[victim], signal.SIGKILL)
        thread.join(timeout=240)
        assert not thread.is_alive(), "the run did not finish after the kill"
        client.wait_for_workers(2, timeout=120)  # the nanny restarted the killed worker
    assert "error" not in result, result.get("error")
    res = result["run"]
    assert res.completed and not res.errors and res.n_done == N_TASKS
    _assert_identical(reference, res.dataset)
    _assert_identical(reference, read_dataset(out))
    assert victim not in client.run(os.getpid)  # the killed process is gone; a new one replaced it
    # the tasks the dead worker held were computed again, on another worker
    finished = [t for t in stream.data if str(t["key"]).startswith("simkit-")]
    rerun = {t["key"] for t in finished if t["key"] in in_flight and t["worker"] != victim}
    assert rerun, (in_flight, [(t["key"], t["worker"]) for t in finished])
    # no block lost or duplicated: each task checkpointed once, every block present once
    assert set(saves) == _expected_task_names() and set(saves.values()) == {1}
    (partial,) = _partial_dirs(out)
    files = sorted(p.name for p in partial.iterdir())
    assert files == sorted(["manifest.json", *(f"{n}.npz" for n in _expected_task_names())])  # no temp files
    assert np.all(np.isfinite(res.dataset["raw_gap_cv"].values))
    assert res.dataset.sizes["block"] == N_BLOCKS
    shutil.rmtree(partial)


def test_an_installed_study_pickles_by_name_and_reads_the_entry_points_once(monkeypatch, tmp_path):
    """A Dask run pickles its study for every task and each worker unpickles it (by name, through
    the entry points): the entry points (~30 ms to read) are read once per process while sys.path
    and its directories are unchanged, and read again when a directory on it changes."""
    import importlib.metadata as md
    import pickle

    from simkit.runner import study as study_mod
    calls = []
    real = md.entry_points
    monkeypatch.setattr(study_mod.md, "entry_points", lambda **kw: calls.append(1) or real(**kw))
    study_mod._EP_CACHE.clear()
    for _ in range(5):
        assert pickle.loads(pickle.dumps(STUDY)) is STUDY
    assert len(calls) == 1
    fresh = type(STUDY)()  # an equal object that is not the installed one travels by value
    copy = pickle.loads(pickle.dumps(fresh))
    assert copy is not STUDY and copy is not fresh and type(copy) is type(STUDY)
    monkeypatch.syspath_prepend(str(tmp_path))  # sys.path changes: read again
    assert pickle.loads(pickle.dumps(STUDY)) is STUDY and len(calls) == 2
    (tmp_path / "new.dist-info").mkdir()  # a directory on it changes (an install): read again
    os.utime(tmp_path, ns=(0, 10**18))
    assert pickle.loads(pickle.dumps(STUDY)) is STUDY and len(calls) == 3


def _tuned():
    from simkit.runner import _malloc
    return _malloc.TUNED


def test_executor_sets_the_malloc_thresholds_of_every_worker(cluster2):
    """Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which turns off glibc's dynamic
    mmap threshold (a preparation ran 2.6x slower, simkit/runner/_malloc.py). DaskExecutor registers a
    worker plugin that resets the thresholds in every worker process; ``tune_malloc=False`` does not."""
    from simkit.runner._dask_plugin import PLUGIN_NAME
    from simkit.runner.dask import DaskExecutor
    _, client = cluster2

    def registered():
        return client.run_on_scheduler(lambda dask_scheduler: sorted(dask_scheduler.worker_plugins))

    if PLUGIN_NAME in registered():  # an earlier test's executor registered it on this cluster
        client.unregister_worker_plugin(PLUGIN_NAME)
    DaskExecutor(client, tune_malloc=False)
    assert PLUGIN_NAME not in registered()
    DaskExecutor(client)
    assert PLUGIN_NAME in registered()
    tuned = client.run(_tuned)
    assert len(tuned) == 2 and all(tuned.values()), tuned


def test_tune_malloc_is_a_no_op_without_glibc(monkeypatch):
    """Where there is no C library with ``mallopt`` (macOS, musl, Windows) it returns False and
    changes nothing; on this Linux machine it succeeds."""
    from simkit.runner import _malloc

    def no_libc(*args, **kwargs):
        raise OSError("no C library")

    if platform.libc_ver()[0] == "glibc":
        assert _malloc.tune_malloc() is True
    monkeypatch.setattr(_malloc.ctypes, "CDLL", no_libc)
    monkeypatch.setattr(_malloc, "TUNED", False)
    assert _malloc.tune_malloc() is False and _malloc.TUNED is False


def test_dataset_writes_never_take_a_scheduler_lock(cluster2, tmp_path, monkeypatch):
    """While a distributed Client is the default scheduler, xarray locks netCDF writes with a
    ``distributed.Lock`` on the scheduler (so a driver whose scheduler died after the last task could
    not write its dataset: CI saw "ConnectionPool closing"). write_dataset takes a local lock."""
    import distributed.lock
    import xarray as xr
    from xarray.backends.locks import get_write_lock

    from simkit.runner.storage import write_dataset
    _, client = cluster2
    with client.as_current():

        def refuse(*args, **kwargs):
            raise RuntimeError("a scheduler lock was asked for")

        monkeypatch.setattr(distributed.lock.Lock, "__init__", refuse)
        with pytest.raises(RuntimeError, match="scheduler lock"):  # positive control: xarray's default
            get_write_lock(str(tmp_path / "probe.nc"))
        ds = xr.Dataset({"a": (("x",), np.arange(3.0), {"units": "1", "long_name": "a"})},
                        attrs={"Conventions": "CF-1.11"})
        write_dataset(ds, tmp_path / "a.nc")
    with xr.open_dataset(tmp_path / "a.nc") as back:
        assert back["a"].values.tolist() == [0.0, 1.0, 2.0]
