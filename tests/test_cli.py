"""The ``simkit`` command line (simkit.cli): in-process through ``main`` and as a real process
(bad input, the console script, Ctrl-C).

Bad input must exit with status 2, print exactly one line on stderr naming the argument (no
traceback) and leave no file behind. No statistical assertions here.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import simkit
from simkit.cli import main
from simkit.runner import read_dataset

REPO_ROOT = Path(simkit.__file__).resolve().parent.parent
# small enough to run in ~2 s; k_max = 1024 so that vmf-d3's slope can be fitted (5 points >= k_min)
TINY = {"settings": "vmf-d3", "k_max": "1024", "n_blocks": "8", "block_anchors": "64", "pilot_blocks": "1"}


def _sets(overrides: dict[str, str]) -> list[str]:
    return [a for name, value in overrides.items() for a in ("--set", f"{name}={value}")]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``simkit run rate_k --quick`` with tiny overrides, in-process; returns (status, stdout,
    stderr, directory)."""
    d = tmp_path_factory.mktemp("cli")
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(d)  # anything written to a default path would land here, never in the repository
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(["run", "rate_k", "--quick", *_sets(TINY), "--seed", "123", "--out", str(d / "r.nc"),
                           "--report", str(d / "r.pdf"), "--no-progress"])
    finally:
        os.chdir(cwd)
    return status, out.getvalue(), err.getvalue(), d


def test_list(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "rate_k" in out and "C1" in out


@pytest.mark.deterministic(reason="the verdict is only required to be pass or fail")
def test_run_quick_writes_dataset_report_and_table(quick_run):
    status, out, err, d = quick_run
    assert status == 0, err
    assert sorted(os.listdir(d)) == ["r.nc", "r.pdf"]  # no checkpoints, no temporary files
    assert (d / "r.pdf").read_bytes().startswith(b"%PDF")
    ds = read_dataset(d / "r.nc")
    assert ds.attrs["study"] == "rate_k" and ds.attrs["seed"] == 123
    cfg = ds.attrs["config"]
    assert '"quick":true' in cfg and '"k_max":1024' in cfg and '"settings":"vmf-d3"' in cfg
    assert f"wrote {d / 'r.nc'}" in out and f"wrote {d / 'r.pdf'}" in out
    header = next(line for line in out.splitlines() if line.startswith("setting"))
    for column in ("slope", "95% CI", "p(-1/2)", "c1 est", "c1 exact", "verdict"):
        assert column in header
    row = next(line for line in out.splitlines() if line.startswith("vmf-d3"))
    assert f"{ds['slope'].values[0]:.4f}" in row and row.split()[-1] in ("pass", "fail")


def test_report_regenerates_pdf(quick_run, tmp_path, monkeypatch, capsys):
    _, _, _, d = quick_run
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(d / "r.nc"), "--out", str(tmp_path / "again.pdf")]) == 0
    assert (tmp_path / "again.pdf").read_bytes().startswith(b"%PDF")
    assert main(["report", str(d / "r.nc")]) == 0  # default path: reports/<stem>.pdf
    assert (tmp_path / "reports" / "r.pdf").read_bytes().startswith(b"%PDF")
    out = capsys.readouterr().out
    assert "again.pdf" in out and str(Path("reports") / "r.pdf") in out


BAD_RUNS = [
    # (argv after "run", text the one stderr line must contain)
    (["nosuchstudy"], "nosuchstudy"),
    (["rate_k", "--set", "tau=-1"], "'tau'"),
    (["rate_k", "--set", "kappa_m=-3"], "'kappa_m'"),
    (["rate_k", "--set", "dim=1"], "'dim'"),
    (["rate_k", "--set", "foo=1"], "'foo'"),
    (["rate_k", "--set", "k_max=1000"], "'k_max'"),
    (["rate_k", "--set", "n_blocks=nan"], "'n_blocks'"),
    (["rate_k", "--set", "tau=inf"], "'tau'"),
    (["rate_k", "--set", "tau=abc"], "'tau'"),
    (["rate_k", "--set", "tau"], "'--set'"),
    (["rate_k", "--set", "tau=0.5", "--set", "tau=0.6"], "'tau' twice"),
    (["rate_k", "--seed", "-1"], "'--seed'"),
    (["rate_k", "--seed", "abc"], "'--seed'"),
    (["rate_k", "--out", "x.txt"], "'--out'"),
    (["rate_k", "--report", "x.png"], "'--report'"),
]


@pytest.mark.parametrize("argv, name", BAD_RUNS, ids=[" ".join(a) for a, _ in BAD_RUNS])
def test_run_bad_input(argv, name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    given = {a.split("=")[0] for a in argv if "=" in a}
    # tiny overrides for every parameter not under test, so that a regression cannot start a long run
    tiny = _sets({k: v for k, v in TINY.items() if k not in given})
    if "--out" not in argv:
        tiny += ["--out", str(tmp_path / "out.nc")]
    status = main(["run", *argv, *tiny, "--no-progress"])
    captured = capsys.readouterr()
    assert status == 2
    line = _one_line(captured.err)
    assert line.startswith("simkit: error:") and name in line
    assert captured.out == ""
    assert os.listdir(tmp_path) == []  # no dataset, report, checkpoint or directory


def test_argparse_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run"])
    assert exc.value.code == 2
    assert "study" in _one_line(capsys.readouterr().err)


@pytest.fixture
def bad_datasets(quick_run, tmp_path):
    _, _, _, d = quick_run
    data = (d / "r.nc").read_bytes()
    truncated = tmp_path / "truncated.nc"
    truncated.write_bytes(data[: len(data) // 2])
    foreign = tmp_path / "foreign.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}).to_netcdf(foreign, engine="h5netcdf")
    unknown = tmp_path / "unknown.nc"
    xr.Dataset({"a": ("x", np.arange(3.0))}, attrs={"study": "nosuch", "simkit_version": "0"}).to_netcdf(
        unknown, engine="h5netcdf")
    return {"missing": tmp_path / "missing.nc", "truncated": truncated, "foreign": foreign, "unknown": unknown}


@pytest.mark.parametrize("kind", ["missing", "truncated", "foreign", "unknown"])
def test_report_bad_dataset(bad_datasets, kind, tmp_path, monkeypatch, capsys):
    path = bad_datasets[kind]
    monkeypatch.chdir(tmp_path)
    before = sorted(os.listdir(tmp_path))
    status = main(["report", str(path), "--out", str(tmp_path / "x.pdf")])
    captured = capsys.readouterr()
    assert status == 2
    line = _one_line(captured.err)
    assert str(path) in line
    assert sorted(os.listdir(tmp_path)) == before  # no report written


# ----------------------------------------------------------------------------------------------
# as a real process


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))


def test_subprocess_list_and_bad_input(tmp_path):
    res = subprocess.run([sys.executable, "-m", "simkit.cli", "list"], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "rate_k" in res.stdout and "C1" in res.stdout
    res = subprocess.run([sys.executable, "-m", "simkit.cli", "run", "rate_k", "--set", "tau=-1", "--out",
                          str(tmp_path / "x.nc")], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2
    assert "'tau'" in _one_line(res.stderr)
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(shutil.which("simkit") is None and not (Path(sys.executable).parent / "simkit").exists(),
                    reason="the simkit console script is not installed")
def test_console_script_report_missing(tmp_path):
    exe = shutil.which("simkit") or str(Path(sys.executable).parent / "simkit")
    res = subprocess.run([exe, "report", str(tmp_path / "missing.nc")], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert str(tmp_path / "missing.nc") in _one_line(res.stderr)


# design of the Ctrl-C test: 2 x (1 + 40) tasks, a few seconds in all, so that SIGINT lands mid-run
INTERRUPTED = {"settings": "uniform-d3,vmf-d3", "k_max": "4096", "n_blocks": "40", "block_anchors": "256",
               "pilot_blocks": "1"}


def test_ctrl_c_exits_130_keeps_finished_tasks_and_resumes(tmp_path, monkeypatch, capsys):
    """SIGINT (Ctrl-C) to ``simkit run`` once checkpoints exist: exit status 130, one line on
    stderr, no dataset, every finished task kept; the same command again resumes to the dataset of
    an uninterrupted run."""
    from simkit.runner import resolve_config, results_identical, run_study
    from studies.rate_k import STUDY

    out = tmp_path / "rate_k.nc"
    argv = ["run", "rate_k", *_sets(INTERRUPTED), "--seed", "7", "--out", str(out), "--no-report", "--no-progress"]
    # a process started in the background of a non-interactive shell inherits SIGINT ignored: the child
    # restores the default disposition, as a terminal's Ctrl-C would find it
    proc = subprocess.Popen([sys.executable, "-m", "simkit.cli", *argv], cwd=tmp_path, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    try:
        deadline, n = time.monotonic() + 240, 0
        while time.monotonic() < deadline and proc.poll() is None:
            dirs = list(tmp_path.glob(".rate_k.nc.*.partial"))
            n = len([p for p in dirs[0].glob("*.npz") if not p.name.startswith(".")]) if dirs else 0
            if n >= 4:
                break
            time.sleep(0.005)
        assert proc.poll() is None and n >= 4, "the run ended, or wrote no checkpoint, before the interrupt"
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr[-3000:]
    line = _one_line(stderr)
    assert stdout == ""
    m = re.fullmatch(r"simkit: interrupted; (\d+)/82 tasks are kept in (\S+); run the same command again to resume",
                     line)
    assert m, line
    assert not out.exists()
    (partial,) = tmp_path.glob(".rate_k.nc.*.partial")
    assert Path(m.group(2)).resolve() == partial.resolve()
    kept = sorted(p.name for p in partial.iterdir() if p.suffix == ".npz")
    assert not [k for k in kept if k.startswith(".")]  # no temporary file left
    # a SIGINT landing between a checkpoint's rename and its bookkeeping keeps one file more than
    # the message counts; never fewer
    assert 4 <= int(m.group(1)) <= len(kept) <= int(m.group(1)) + 1 < 82

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0  # the same command, in-process this time
    resumed = read_dataset(out)
    assert resumed.attrs["resumed_tasks"] == len(kept)
    clean = run_study(STUDY, resolve_config(STUDY, INTERRUPTED, seed=7), tmp_path / "clean" / "rate_k.nc",
                      progress=False)
    assert results_identical(clean.dataset, resumed)
    assert sorted(os.listdir(tmp_path)) == ["clean", "rate_k.nc"]
    capsys.readouterr()
