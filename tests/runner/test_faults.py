"""Faults of a run: a second run of the same output, unwritable outputs, failed writes (no space
left, I/O error, netCDF-C's HDF error on a full disk) of a checkpoint, the dataset and the report, a
Dask scheduler lost mid-run, a damaged checkpoint manifest, SIGTERM, Ctrl-C within a long block, a
design too large for memory, ``simkit report`` of a dataset that does not match its schema, and a
property test over argument vectors of every subcommand. Every check here is deterministic (no
statistical assertion)."""

from __future__ import annotations

import errno
import importlib
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simkit
from simkit import runner
from simkit.cli import main
from simkit.runner import WriteFailed, read_dataset, resolve_config, results_identical, run_study
from studies.rate_k import STUDY

REPO_ROOT = Path(simkit.__file__).resolve().parent.parent
SEED = 20261211
TINY = {"settings": "uniform-d3,vmf-d3", "k_max": 256, "n_blocks": 8, "block_anchors": 64, "pilot_blocks": 1}
N_TASKS = 2 * (1 + 8)
SIMKIT = Path(sys.executable).parent / "simkit"


def _cfg(**over):
    return resolve_config(STUDY, {**TINY, **over}, seed=SEED)


def _cli(*args):
    return [str(SIMKIT)] if SIMKIT.exists() else [sys.executable, "-m", "simkit.cli"]


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))


def _tiny_args():
    return [a for n, v in TINY.items() for a in ("--set", f"{n}={v}")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "rate_k.nc"
    res = run_study(STUDY, _cfg(), out, progress=False)
    assert res.completed and not res.errors
    return res.dataset


def _same(a, b) -> bool:
    """results_identical, except git_commit (engineers commit to a shared checkout during a test run)."""
    a, b = a.copy(), b.copy()
    for d in (a, b):
        d.attrs.pop("git_commit", None)
    return results_identical(a, b)


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------------------------
# a second run of the same output

HOLD = ("import sys, time\n"
        "from simkit.runner import RunLock\n"
        "lock = RunLock(sys.argv[1]); lock.acquire(); print('locked', flush=True); time.sleep(600)\n")


def test_second_run_of_the_same_output_exits_2_naming_the_running_process(tmp_path):
    out = tmp_path / "rate_k.nc"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True, env=_env())
    try:
        assert holder.stdout.readline().strip() == "locked"
        proc = subprocess.run([*_cli(), "run", "rate_k", "--out", str(out), "--no-progress", *_tiny_args()],
                              capture_output=True, text=True, env=_env(), timeout=300)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in proc.stderr
        assert f"pid {holder.pid}" in lines[0] and "'--out'" in lines[0] and "running simkit" in lines[0]
        assert not out.exists() and not list(tmp_path.glob(".*.partial"))
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone: its lock is stale and the next run takes it over
    proc = subprocess.run([*_cli(), "run", "rate_k", "--out", str(out), "--no-progress", "--no-report",
                           *_tiny_args(), "--seed", str(SEED)], capture_output=True, text=True, env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert out.exists() and not (tmp_path / f".{out.name}.lock").exists()


def test_run_study_refuses_a_locked_output(tmp_path):
    out = tmp_path / "x.nc"
    with runner.RunLock(out):
        # flock is per open file description: a second lock in the same process is refused too
        with pytest.raises(runner.OutputBusy, match=rf"pid {os.getpid()}"):
            run_study(STUDY, _cfg(), out, progress=False)
    assert not out.exists()


# ----------------------------------------------------------------------------------------------
# unwritable outputs: refused before anything runs, nothing written

@pytest.mark.parametrize("option,path", [("--out", "/proc/simkit-x.nc"), ("--report", "/proc/simkit-r.pdf"),
                                         ("--out", "FILE/x.nc")])
def test_unwritable_output_is_refused_before_any_task(tmp_path, monkeypatch, capsys, option, path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "FILE").write_text("a file, not a directory")
    monkeypatch.setattr(runner, "run_study", lambda *a, **k: pytest.fail("a task ran"))
    argv = ["run", "rate_k", "--no-progress", *_tiny_args(), "--out", str(tmp_path / "ok.nc")]
    argv += [option, path]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"'{option}'" in err[0] and "Traceback" not in err[0]
    assert _leftovers(tmp_path) == ["FILE"]


# ----------------------------------------------------------------------------------------------
# failed writes: one line, exit 1, no partial file, finished checkpoints kept, the same command resumes

def _failing_after(real, n_ok: int, err: int):
    calls = {"n": 0}

    def wrapped(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > n_ok:
            raise OSError(err, os.strerror(err))
        return real(*args, **kwargs)
    return wrapped


def test_checkpoint_write_fails_with_no_space_then_resumes(reference, tmp_path, monkeypatch):
    out = tmp_path / "rate_k.nc"
    monkeypatch.setattr(np, "savez", _failing_after(np.savez, 5, errno.ENOSPC))
    with pytest.raises(WriteFailed, match=r"No space left on device.*5/18 finished tasks are kept"):
        run_study(STUDY, _cfg(), out, progress=False)
    (partial,) = tmp_path.glob(".rate_k.nc.*.partial")
    assert len(list(partial.glob("*.npz"))) == 5 and not out.exists()
    assert all(not p.name.startswith(".") for p in partial.iterdir())  # no temporary file left
    monkeypatch.undo()
    res = run_study(STUDY, _cfg(), out, progress=False)
    assert res.completed and res.dataset.attrs["resumed_tasks"] == 5
    assert _same(reference, res.dataset)


def test_dataset_write_fails_with_io_error_then_resumes(reference, tmp_path, monkeypatch, capsys):
    import xarray as xr
    out = tmp_path / "rate_k.nc"
    monkeypatch.setattr(xr.Dataset, "to_netcdf", _failing_after(xr.Dataset.to_netcdf, 0, errno.EIO))
    argv = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Input/output error" in err[0] and f"all {N_TASKS} tasks are kept" in err[0]
    assert not out.exists() and [p.name for p in tmp_path.iterdir() if p.suffix == ".nc"] == []
    (partial,) = tmp_path.glob(".rate_k.nc.*.partial")
    assert len(list(partial.glob("*.npz"))) == N_TASKS
    monkeypatch.undo()
    assert main(argv) == 0
    assert _same(reference, read_dataset(out))


def test_every_preparation_failing_is_one_line_exit_1_and_resumes(reference, tmp_path, monkeypatch, capsys):
    """Every cell's preparation raises, so no block can run and rate_k's summary lacks its prepared
    constants (it raised KeyError 'prep_rho' with a traceback before): one line naming the summary's
    error and the first failed task, exit 1, no dataset, the lock released; once the fault is gone the
    same command runs the failed tasks and gives the reference dataset."""
    def boom(self, cell, cfg, rng):
        raise RuntimeError("injected preparation failure")

    out = tmp_path / "rate_k.nc"
    monkeypatch.setattr(type(STUDY), "prepare", boom)
    argv = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out", str(out)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "the summary of rate_k failed (KeyError" in err[0] and "2 failed task(s)" in err[0]
    assert "a prepare of cell 0 (RuntimeError: injected preparation failure)" in err[0]
    assert "run the same command again" in err[0]
    assert not out.exists() and not (tmp_path / f".{out.name}.lock").exists()
    # a summary that raises on a run without failed tasks is a bug of the study: its own exception
    monkeypatch.undo()
    monkeypatch.setattr(type(STUDY), "summarise", lambda self, raw, cfg: {}["no such summary"])
    with pytest.raises(KeyError):
        run_study(STUDY, _cfg(), tmp_path / "other.nc", progress=False)
    monkeypatch.undo()
    assert main(argv) == 0
    assert _same(reference, read_dataset(out))


def test_report_write_fails_one_line_exit_1_no_partial_pdf(tmp_path, monkeypatch, capsys):
    from simkit.report import document
    out, pdf = tmp_path / "rate_k.nc", tmp_path / "rate_k.pdf"

    class FullDisk:
        def __init__(self, *a, **k):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(document, "PdfPages", FullDisk)
    argv = ["run", "rate_k", "--no-progress", *_tiny_args(), "--out", str(out), "--report", str(pdf)]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "simkit report" in err[0]
    assert out.exists() and not pdf.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".rate_k.pdf")]


# ----------------------------------------------------------------------------------------------
# the Dask scheduler lost mid-run

def _spawn(*args):
    return subprocess.Popen(list(args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(),
                            start_new_session=True)


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_scheduler_lost_mid_run_keeps_checkpoints_and_the_same_command_finishes(reference, tmp_path):
    pytest.importorskip("distributed")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    py = sys.executable
    sched = _spawn(py, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port),
                   "--dashboard-address", "127.0.0.1:0", "--no-show")
    worker = _spawn(py, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1", "--nworkers", "1",
                    "--no-dashboard")
    out = tmp_path / "rate_k.nc"
    # slow blocks so that the run is still going when the scheduler dies: many small blocks
    args = [*_cli(), "run", "rate_k", "--out", str(out), "--no-progress", "--no-report", "--seed", str(SEED),
            *_tiny_args()]
    try:
        deadline = time.time() + 120
        run = None
        while time.time() < deadline:  # wait for the scheduler and its worker
            probe = subprocess.run([py, "-c", f"from distributed import Client; c = Client('{address}', timeout=5); "
                                    "import sys; sys.exit(0 if c.scheduler_info()['workers'] else 1)"],
                                   capture_output=True, env=_env(), timeout=60)
            if probe.returncode == 0:
                break
            time.sleep(1)
        run = subprocess.Popen([*args, "--scheduler", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=_env())
        partial = None
        while time.time() < deadline and run.poll() is None:
            found = list(tmp_path.glob(".rate_k.nc.*.partial"))
            if found and len(list(found[0].glob("*.npz"))) >= 3:
                partial = found[0]
                break
            time.sleep(0.005)
        assert partial is not None, "the run finished before the scheduler could be killed"
        # the worker stops first, so that no further result can arrive: with blocks sent in batches the
        # remaining tasks took ~0.1 s, and in up to 1 run of 2 they finished between the poll and the
        # kill (the run then completed, or failed writing its dataset)
        os.killpg(worker.pid, signal.SIGSTOP)
        os.killpg(sched.pid, signal.SIGKILL)
        stdout, stderr = run.communicate(timeout=180)
    finally:
        for p in (sched, worker):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if run is not None and run.poll() is None:
            run.kill()
    lines = stderr.strip().splitlines()
    assert run.returncode == 1, stderr
    assert len(lines) == 1 and "Traceback" not in stderr and re.search(r"scheduler .* was lost", lines[0])
    kept = len(list(partial.glob("*.npz")))
    assert kept >= 3 and f"{kept}/{N_TASKS} finished tasks are kept" in lines[0] and not out.exists()
    # the same command, in-process this time, finishes with the reference dataset
    again = subprocess.run(args, capture_output=True, text=True, env=_env(), timeout=600)
    assert again.returncode == 0, again.stderr
    ds = read_dataset(out)
    assert ds.attrs["resumed_tasks"] == kept and _same(reference, ds)


# ----------------------------------------------------------------------------------------------
# no traceback, ever: argument vectors of every subcommand

TOKENS = ["run", "report", "list", "validate", "calibrate", "diagnose", "rate_k", "search_ce", "nope", "--quick",
          "--full", "--seeds", "--first-seed", "--alternative", "sqrt-k", "--keep-checkpoint", "0", "2**70",
          "--seed", "-1", "7", "x", "--out", "--report", "a.nc", "b.pdf", "/proc/z.nc", "--set", "k_max=16",
          "k_max=-3", "n_blocks=abc", "=", "--scheduler", "tcp://127.0.0.1:1", "--no-report", "--no-progress",
          "--tau", "0", "--k", "1e99", "--eps", "nan", "missing.npz", "", "\x00", "é", "--help", "-h"]


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(argv=st.lists(st.sampled_from(TOKENS) | st.text(max_size=8), max_size=7))
def test_no_traceback_for_any_argument_vector(argv, tmp_path, monkeypatch, capsys):
    """Every argument vector ends in an exit status with at most one error line, never an exception.
    Runs are replaced by stubs (a vector that would run a study returns 0 without running it; validate and
    calibrate stop as if interrupted, 130)."""
    monkeypatch.chdir(tmp_path)
    from simkit.claims import validate
    monkeypatch.setattr(runner, "run_study", lambda *a, **k: runner.RunResult(None, Path("x"), False, 0, 0, [], 0.0))
    monkeypatch.setattr(validate, "run_validation", lambda **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    calibrate = importlib.import_module("simkit.claims.calibrate")  # the module (simkit.claims.calibrate is also the function)
    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        code = exc.code
    captured = capsys.readouterr()
    assert isinstance(code, int) and code in (0, 1, 2, 130), (argv, code)
    assert "Traceback" not in captured.err
    if code == 2 and not any(a in ("--help", "-h") for a in argv):
        assert len([ln for ln in captured.err.splitlines() if ln.startswith("simkit: error")]) == 1, captured.err


# ----------------------------------------------------------------------------------------------
# a full disk at the final netCDF write: netCDF-C's "NetCDF: HDF error" is a failed write

FULL_DISK = ("import resource, signal, sys\n"
             "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead\n"
             "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), int(sys.argv[1])))\n"
             "from simkit.cli import main\n"
             "sys.exit(main(sys.argv[2:]))\n")


def test_full_disk_at_the_netcdf_write_hdf_error_is_one_line_exit_1_then_resumes(reference, tmp_path, capsys):
    """Reproduction: ``simkit run rate_k ...`` in a process whose files may not grow beyond 32 KiB
    (RLIMIT_FSIZE; the checkpoints are ~2 KiB, the dataset ~90 KiB), so that netCDF-C fails inside
    HDF5 and raises ``RuntimeError: NetCDF: HDF error`` (a 56-line traceback before). Now: one line,
    exit 1, no dataset or temporary file, every task kept, and the same command writes the reference."""
    out = tmp_path / "rate_k.nc"
    argv = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", FULL_DISK, str(32 * 1024), *argv], capture_output=True, text=True,
                          env=_env(), timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "NetCDF: HDF error" in lines[0] and f"all {N_TASKS} tasks are kept" in lines[0]
    assert "run the same command again" in lines[0]
    assert _leftovers(tmp_path) == sorted(p.name for p in tmp_path.glob(".rate_k.nc.*.partial/*"))  # no .nc, no lock
    (partial,) = tmp_path.glob(".rate_k.nc.*.partial")
    assert len(list(partial.glob("*.npz"))) == N_TASKS
    assert main(argv) == 0
    ds = read_dataset(out)
    assert ds.attrs["resumed_tasks"] == N_TASKS and _same(reference, ds)
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------
# a damaged checkpoint manifest: rebuilt from the task files, which carry their own checksums

@pytest.mark.deterministic(reason="fixed seeds; the resumed dataset must equal the reference exactly")
@pytest.mark.parametrize("damage", ["empty", "truncated", "garbled", "task"])
def test_damaged_manifest_is_rebuilt_from_the_task_files_and_the_run_resumes(reference, tmp_path, capsys, damage):
    """Reproduction: interrupt a run after 5 tasks, then empty, truncate or garble its checkpoint
    ``manifest.json`` (what a power cut before a sync can leave) and run the same command: a traceback
    and the advice to remove the directory before. Now: one line saying the manifest was rebuilt, exit 0,
    every task that passes its CRC-32 resumed ("task": one task file damaged too, removed and rerun), and
    the reference dataset."""
    out = tmp_path / "rate_k.nc"
    res = run_study(STUDY, _cfg(), out, progress=False, stop_after=5)
    assert not res.completed
    (partial,) = tmp_path.glob(".rate_k.nc.*.partial")
    manifest = partial / "manifest.json"
    text = manifest.read_bytes()
    manifest.write_bytes({"empty": b"", "truncated": text[:len(text) // 2], "garbled": b"\x00\xff" * 40,
                          "task": b"{"}[damage])
    kept = 5
    if damage == "task":  # flip the last data byte of one task file's first array: its CRC-32 no longer matches
        import zipfile
        victim = sorted(partial.glob("*.npz"))[0]
        with zipfile.ZipFile(victim) as z:
            info = z.infolist()[0]
        data = bytearray(victim.read_bytes())
        name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)  # the local file header
        data[info.header_offset + 30 + name_len + extra_len + info.file_size - 1] ^= 0xFF
        victim.write_bytes(bytes(data))
        kept = 4
    capsys.readouterr()
    argv = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out", str(out)]
    assert main(argv) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    assert "manifest" in err[0] and f"rebuilt it: {kept} task file(s) passed their checksums" in err[0]
    assert ("1 damaged one(s) removed" in err[0]) == (damage == "task")
    ds = read_dataset(out)
    assert ds.attrs["resumed_tasks"] == kept and _same(reference, ds)


def test_manifest_of_another_configuration_is_one_line_exit_2_nothing_removed(tmp_path, capsys):
    """A readable manifest whose configuration hashes to the directory's name but is not this run's (a
    hash collision, simulated by renaming another configuration's directory to this one's): one line
    naming the directory, exit 2, its task files left alone."""
    out = tmp_path / "rate_k.nc"
    run_study(STUDY, _cfg(n_blocks=9), out, progress=False, stop_after=3)
    (other,) = tmp_path.glob(".rate_k.nc.*.partial")
    ours = runner.Checkpoint(out, STUDY.name, _cfg())
    other.rename(ours.dir)
    capsys.readouterr()
    from simkit.runner import storage
    real = storage._config_hash
    with pytest.MonkeyPatch.context() as mp:  # the other manifest hashes to this directory's name
        mp.setattr(storage, "_config_hash", lambda study, cfg: ours.hash)
        argv = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out",
                str(out)]
        assert main(argv) == 2
    assert real is storage._config_hash
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "another configuration" in err[0] and str(ours.dir) in err[0]
    assert len(list(ours.dir.glob("*.npz"))) == 3 and not out.exists()
    assert not (tmp_path / f".{out.name}.lock").exists()


def test_checkpoint_writes_are_synced_file_then_directory(tmp_path, monkeypatch):
    """A task file and the manifest reach the disk before they are renamed into place, and the rename
    itself is synced (the directory), so that a power cut leaves the old state or the new one."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(src), str(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    ckpt = runner.Checkpoint(tmp_path / "x.nc", "rate_k", {"seed": 1})
    ckpt.open()
    ckpt.save("task", {"a": np.arange(3.0)})
    for name in ("manifest.json", "task.npz"):
        (i,) = [j for j, e in enumerate(events) if e[0] == "replace" and e[2] == str(ckpt.dir / name)]
        src = events[i][1]
        assert events[i - 1] == ("fsync", src), events  # the file's data, before the rename
        assert events[i + 1] == ("fsync", str(ckpt.dir)), events  # the rename, after it


# ----------------------------------------------------------------------------------------------
# SIGTERM is handled as Ctrl-C

SIGTERM_AT = ("import os, signal, sys\n"
              "from studies.rate_k import STUDY\n"
              "real, calls = type(STUDY).generate, []\n"
              "def generate(self, *args):\n"
              "    calls.append(1)\n"
              "    if len(calls) == int(sys.argv[1]):  # a real SIGTERM, from the kernel, during this block\n"
              "        os.kill(os.getpid(), signal.SIGTERM)\n"
              "    return real(self, *args)\n"
              "type(STUDY).generate = generate\n"
              "from simkit.cli import main\n"
              "sys.exit(main(sys.argv[2:]))\n")


def test_sigterm_keeps_finished_tasks_in_one_line_exit_143_releases_the_lock_and_resumes(reference, tmp_path,
                                                                                          capsys):
    """Reproduction: ``kill -TERM`` a running ``simkit run rate_k ...`` (here the process signals itself
    during its 5th block, so that the signal lands mid-run on every machine): exit 143 with no "tasks kept"
    line and the lock file left behind before. Now, as for Ctrl-C: one line naming the tasks kept, exit 143,
    the lock file removed, no dataset, and the same command resumes to the reference dataset."""
    out = tmp_path / "rate_k.nc"
    argv = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", SIGTERM_AT, "5", *argv], capture_output=True, text=True,
                          env=_env(), timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    m = re.fullmatch(rf"simkit: interrupted; (\d+)/{N_TASKS} tasks are kept in (\S+); run the same command again "
                     "to resume", lines[0])
    assert m, lines[0]
    (partial,) = tmp_path.glob(".rate_k.nc.*.partial")
    kept = len(list(partial.glob("*.npz")))
    assert int(m.group(1)) == kept == 2 + 4  # both preparations and the 4 blocks before the signalled one
    assert not out.exists() and not (tmp_path / f".{out.name}.lock").exists()
    assert main(argv) == 0
    ds = read_dataset(out)
    assert ds.attrs["resumed_tasks"] == kept and _same(reference, ds)
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------
# simkit report checks the dataset against its study's declared schema before drawing

def _damaged(reference, tmp_path: Path, damage: str) -> Path:
    from simkit.runner import storage
    cf = storage._to_cf(reference)
    if damage in ("gap", "verdict", "setting_label"):
        cf = cf.drop_vars(damage)
    elif damage == "study":
        cf.attrs["study"] = "search_ce"
    elif damage == "dims":
        cf["gap"] = cf["gap"].transpose()
    path = tmp_path / f"{damage}.nc"
    cf.to_netcdf(path, engine=storage.ENGINE,
                 encoding={n: {"_FillValue": None} for n in cf.coords if cf[n].dtype.kind == "f"})
    return path


@pytest.mark.deterministic(reason="schema checks on committed and edited datasets: no random numbers are compared")
@pytest.mark.parametrize("damage", ["gap", "verdict", "setting_label", "study", "dims"])
def test_report_of_a_dataset_not_matching_its_schema_is_one_line_exit_2(reference, tmp_path, capsys, damage):
    """Reproduction: ``simkit report`` of a rate_k dataset without ``gap``, ``verdict`` or ``setting_label``,
    with another study's ``study`` attribute (search_ce), or with ``gap``'s dimensions swapped: a traceback
    and exit 1 before. Now: one line naming the file and what does not match, exit 2, no PDF drawn, the
    dataset untouched."""
    path = _damaged(reference, tmp_path, damage)
    before = path.read_bytes()
    pdf = tmp_path / "r.pdf"
    assert main(["report", str(path), "--out", str(pdf)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"simkit: error: '{path}' ") and "Traceback" not in err[0], err
    expected = {"gap": "lacks 'gap'", "verdict": "lacks 'verdict'", "setting_label": "lacks 'setting_label'",
                "study": "schema of study 'search_ce'", "dims": "'gap' ('k', 'setting') (declared ('setting', 'k'))"}
    assert expected[damage] in err[0], err[0]
    assert not pdf.exists() and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert path.read_bytes() == before


def test_report_of_the_intact_dataset_passes_the_schema_check(reference, tmp_path, capsys):
    """The positive control of the test above: the same file, undamaged, gives its report (exit 0)."""
    path = _damaged(reference, tmp_path, "none")
    assert main(["report", str(path), "--out", str(tmp_path / "r.pdf")]) == 0
    assert (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF")
    capsys.readouterr()


def _committed() -> list[Path]:
    data = REPO_ROOT / "data"
    return sorted(p for p in [*data.glob("*.nc"), *data.glob("calibration/**/*.nc")]
                  if not p.name.startswith("validation") and p.name != "claims.nc")


def test_every_committed_dataset_passes_the_schema_check_of_simkit_report():
    """No dataset simkit wrote is refused: every study's committed run and every calibration (archived
    ones included) matches its study's declared schema."""
    from simkit.claims.calibrate import Calibration
    from simkit.runner import check_dataset, get_study
    paths = _committed()
    assert len(paths) >= 11
    for path in paths:
        ds = read_dataset(path)
        name = str(ds.attrs["study"])
        study = (Calibration(get_study(ds.attrs["target_study"]), {}, []) if name.startswith("calibrate-")
                 else get_study(name))
        check_dataset(study, ds, str(path))


def test_a_design_without_some_sweeps_passes_one_without_a_summary_does_not():
    """generalisation's quick design runs four of its eight sweeps (no pre-registered NI sweep, no C3
    conclusion): declared optional, not refused; a summary every design writes is required."""
    from simkit.runner import check_dataset, get_study
    study = get_study("generalisation")
    ds = read_dataset(REPO_ROOT / "data" / "generalisation.nc")
    ni = [n for n in ds.data_vars if n.startswith(("kprim_", "kctl_", "krot_", "kbrown_")) or n == "c3_conclusion"]
    assert len(ni) == 45
    check_dataset(study, ds.drop_vars(ni), "quick-like")
    with pytest.raises(ValueError, match=r"^quick-like does not match the schema of study 'generalisation' "
                                         r"\(its 'study' attribute\): it lacks 'gap_cv'$"):
        check_dataset(study, ds.drop_vars("gap_cv"), "quick-like")


# ----------------------------------------------------------------------------------------------
# Ctrl-C within a long block: the prefix kernel runs in calls of bounded work, signals act between them

@pytest.mark.parametrize("d", [3, 16])  # the small-d path and the BLAS path of the kernel
def test_a_block_cut_into_kernel_calls_is_bit_identical_to_one_call(monkeypatch, d):
    """The anchors of a block go to the prefix kernel in calls of whole tiles: every result is bit for
    bit the single call's, remainder tile included (1000 anchors = 31 tiles of 32 + 8 rows)."""
    from simkit.estimators import infonce
    from simkit._jit.blas import single_threaded_blas
    from simkit._jit.infonce import prefix_sums, tile_negatives
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((1000, d)), rng.standard_normal((4096, d))
    shift, grid, tau = rng.standard_normal(1000), 2 ** np.arange(13, dtype=np.int64), 0.7
    one = np.empty((1000, grid.size))
    with single_threaded_blas():
        prefix_sums(x, tile_negatives(y), 4096, 1.0 / tau, shift, grid, one)
    calls = []
    monkeypatch.setattr(infonce, "CALL_WORK", 1)  # the fewest rows per call: 4 tiles per thread
    monkeypatch.setattr(infonce, "prefix_sums", lambda x, *a: calls.append(len(x)) or prefix_sums(x, *a))
    cut = infonce._prefix(x, y, tau, shift, grid)
    assert len(calls) > 1 and all(n % 32 == 0 for n in calls[:-1]) and sum(calls) == 1000
    assert np.array_equal(cut, one)


CTRL_C_IN_BLOCK = ("import atexit, os, signal, sys\n"
                   "signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's Ctrl-C finds it\n"
                   "from simkit.estimators import infonce\n"
                   "from studies.rate_k import STUDY\n"
                   "infonce.CALL_WORK = 1  # many calls per block, however small the design\n"
                   "real_prefix, real_generate, calls = infonce.prefix_sums, type(STUDY).generate, []\n"
                   "def prefix(x, *args):\n"
                   "    if calls:\n"
                   "        calls[-1] += 1\n"
                   "        if calls == [2]:  # Ctrl-C while the kernel runs, in the first block's second call\n"
                   "            os.kill(os.getpid(), signal.SIGINT)\n"
                   "    return real_prefix(x, *args)\n"
                   "def generate(self, *args):\n"
                   "    calls.append(0)\n"
                   "    return real_generate(self, *args)\n"
                   "infonce.prefix_sums, type(STUDY).generate = prefix, generate\n"
                   "atexit.register(lambda: print(f'calls {calls} of {1024 // infonce._rows_per_call(256, 3)}'))\n"
                   "from simkit.cli import main\n"
                   "sys.exit(main(sys.argv[1:]))\n")


def test_ctrl_c_during_a_long_block_takes_effect_at_the_next_kernel_call(tmp_path, capsys):
    """Reproduction: Ctrl-C during a block of ``block_anchors=2^20`` took effect only when the block's
    one kernel call returned (64 s). Here SIGINT arrives during the second of the first block's kernel
    calls (1024 anchors cut into 8 calls of 128, one Numba thread): the block stops there — 2 calls, not
    8 —, the run ends with its one line and exit 130, and the same command resumes to the dataset of an
    uninterrupted run."""
    big = {**TINY, "block_anchors": 1024}
    args = [a for n, v in big.items() for a in ("--set", f"{n}={v}")]
    out = tmp_path / "rate_k.nc"
    argv = ["run", "rate_k", "--no-progress", "--no-report", *args, "--seed", str(SEED), "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", CTRL_C_IN_BLOCK, *argv], capture_output=True, text=True,
                          env={**_env(), "NUMBA_NUM_THREADS": "1"}, timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert proc.stdout.strip() == "calls [2] of 8", proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and re.fullmatch(rf"simkit: interrupted; 2/{N_TASKS} tasks are kept in \S+; run the "
                                            "same command again to resume", lines[0]), proc.stderr[-3000:]
    assert not out.exists() and not (tmp_path / f".{out.name}.lock").exists()
    assert main(argv) == 0
    ds = read_dataset(out)
    assert ds.attrs["resumed_tasks"] == 2
    clean = run_study(STUDY, resolve_config(STUDY, big, seed=SEED), tmp_path / "clean" / "rate_k.nc", progress=False)
    assert _same(clean.dataset, ds)
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------
# a design that cannot fit in memory is refused before any task

MEMORY_CAP = ("import resource, sys\n"
              "cap = int(sys.argv[1])\n"
              "resource.setrlimit(resource.RLIMIT_AS, (cap, cap))  # the address space this process may use\n"
              "from simkit.cli import main\n"
              "sys.exit(main(sys.argv[2:]))\n")


def test_design_too_large_for_memory_is_refused_before_any_task_exit_2(reference, tmp_path):
    """Reproduction: ``simkit run rate_k --set dim=4096 --set n_mc=16777216 --set settings=mixture-d16``
    under a 10 GiB cap (here RLIMIT_AS): 16 preparation parts of 12.8 GiB each were attempted over 51 s,
    then exit 1 with a line opening ``KeyError 'prep_rho'`` (without a cap, the OOM killer). Now: one
    line naming the parameters that drive the largest task and its estimate, exit 2, nothing written; the
    small design runs under the same cap to the reference dataset."""
    cap = str(10 * 2**30)
    out = tmp_path / "rate_k.nc"
    big = ["run", "rate_k", "--set", "dim=4096", "--set", "n_mc=16777216", "--set", "settings=mixture-d16",
           "--out", str(out), "--no-progress"]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", MEMORY_CAP, cap, *big], capture_output=True, text=True, env=_env(),
                          timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert time.monotonic() - t0 < 60  # refused at once, not after the tasks
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    m = re.fullmatch(r"simkit: error: the design needs about ([\d.]+) GiB for a Monte Carlo preparation part of "
                     r"mixture-d16 \(n_mc=16777216, prep_parts=16, dim=4096, k_max=65536\), more than the "
                     r"([\d.]+) GiB this process may use; choose a design that fits with --set", lines[0])
    assert m, lines[0]
    assert float(m.group(1)) > 12.8 and float(m.group(2)) <= 10.0
    assert _leftovers(tmp_path) == []
    small = ["run", "rate_k", "--no-progress", "--no-report", *_tiny_args(), "--seed", str(SEED), "--out", str(out)]
    proc = subprocess.run([sys.executable, "-c", MEMORY_CAP, cap, *small], capture_output=True, text=True,
                          env=_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _same(reference, read_dataset(out))


def test_memory_check_refuses_only_what_does_not_fit():
    """check_memory against a given amount: the default and quick designs fit in 1 GiB; the issue's
    design does not fit in 10 GiB; a study without an estimate is never refused."""
    from simkit.runner import InsufficientMemory, Study, check_memory
    for quick in (False, True):
        est = check_memory(STUDY, resolve_config(STUDY, quick=quick), available=2**30)
        assert 0 < est.bytes < 2**30
    big = resolve_config(STUDY, {"dim": 4096, "n_mc": 1 << 24, "settings": "mixture-d16"})
    with pytest.raises(InsufficientMemory, match=r"n_mc=16777216, prep_parts=16, dim=4096"):
        check_memory(STUDY, big, available=10 * 2**30)
    assert check_memory(Study(), {}, available=0) is None


PEAK = ("import json, sys\n"
        "import numpy as np\n"
        "from studies.rate_k import STUDY\n"
        "from simkit.runner import resolve_config\n"
        "def hwm():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) * 1024\n"
        "def rss():\n"
        "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmRSS')).split()[1]) * 1024\n"
        "out = []\n"
        "for over, part in json.loads(sys.argv[1]):\n"
        "    cfg = resolve_config(STUDY, over)\n"
        "    cell = STUDY.cells(cfg)[0]\n"
        "    small = resolve_config(STUDY, {'settings': over['settings'], 'block_anchors': 64, 'k_max': 256,\n"
        "                                   'n_mc': 4096, 'pilot_blocks': 1, 'prep_parts': 2})\n"
        "    task = (lambda c, g, r: STUDY.prepare_part(c, g, 1, r)) if part else STUDY.prepare\n"
        "    task(STUDY.cells(small)[0], small, np.random.default_rng(0))  # compiled and warm\n"
        "    open('/proc/self/clear_refs', 'w').write('5')  # the peak restarts from here\n"
        "    base = rss()\n"
        "    task(cell, cfg, np.random.default_rng(1))\n"
        "    out.append([hwm() - base, STUDY.peak_memory(cfg).bytes])\n"
        "print(json.dumps(out))\n")


def test_rate_k_memory_estimate_bounds_the_measured_peak():
    """The estimate is an upper bound of the peak resident memory the largest task adds, and not a loose
    one: the preparation of uniform-d3 (its pilot of 4 blocks of 2^16 anchors, k_max 256) and a Monte
    Carlo preparation part (mixture-d16, d = 128, half of n_mc = 2^18 anchors), ~200 MB each, measured
    in a fresh process (VmHWM after a reset)."""
    designs = [[{"settings": "uniform-d3", "block_anchors": 1 << 16, "k_max": 256, "pilot_blocks": 4}, False],
               [{"settings": "mixture-d16", "n_mc": 1 << 18, "prep_parts": 2, "dim": 128, "block_anchors": 256,
                 "k_max": 4096}, True]]
    proc = subprocess.run([sys.executable, "-c", PEAK, json.dumps(designs)], capture_output=True, text=True,
                          env=_env(), timeout=600, cwd=REPO_ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for (measured, estimate), (over, _) in zip(json.loads(proc.stdout), designs):
        assert measured > 100 * 2**20, (over, measured)  # the task's arrays, not the allocator's noise
        assert measured <= estimate <= 2.0 * measured, (over, measured, estimate)
