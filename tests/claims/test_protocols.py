"""Pre-registration: every committed dataset that names a protocol matches it, and the
protocol was committed before the run (in the tree that ran); validate keeps confirmatory rows apart."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from simkit.claims.protocol import analysis_label, is_confirmatory, protocol_attrs, recorded_protocols
from simkit.runner import read_dataset
from simkit.claims.validate import combine_checks

ROOT = Path(__file__).resolve().parents[2]
DATASETS = sorted(p for p in (ROOT / "data").glob("*.nc"))


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)


def _with_protocol():
    """(dataset, attribute prefix) for every protocol a committed dataset records."""
    out = []
    for p in DATASETS:
        with xr.open_dataset(p, engine="h5netcdf") as ds:
            out += [(p, prefix) for prefix in recorded_protocols(ds.attrs).values()]
    return out


PROTOCOL_DATASETS = _with_protocol()


def test_some_dataset_is_confirmatory():
    assert PROTOCOL_DATASETS, "no committed dataset names a protocol"


@pytest.mark.parametrize("path, prefix", PROTOCOL_DATASETS, ids=lambda p: getattr(p, "name", p))
def test_dataset_matches_its_protocol_committed_before_the_run(path, prefix):
    ds = read_dataset(path)
    proto = str(ds.attrs[f"{prefix}_path"])
    assert ds.attrs[f"{prefix}_sha256"] == hashlib.sha256((ROOT / proto).read_bytes()).hexdigest(), \
        f"{proto} changed after the run of {path.name}"
    commit = str(ds.attrs[f"{prefix}_commit"])
    data_commit = str(ds.attrs["git_commit"]).removesuffix("-dirty")
    if _git("cat-file", "-e", f"{data_commit}^{{commit}}").returncode != 0:
        pytest.skip(f"the dataset's git_commit {data_commit} is not in this clone")
    # the protocol's commit is the run's commit or an ancestor of it: the rule was in the tree that ran
    # (a run at the protocol's own commit ran exactly the code the protocol was written against)
    assert _git("merge-base", "--is-ancestor", commit, data_commit).returncode == 0
    # the protocol's own commit touches nothing but protocols/ (committed alone)
    files = _git("show", "--name-only", "--format=", commit).stdout.split()
    assert files and all(f.startswith("protocols/") for f in files), files
    assert _git("log", "-1", "--format=%H", "--", proto).stdout.strip() == commit
    # confirmatory only when run from an unmodified work tree
    assert is_confirmatory(ds, proto) == (not str(ds.attrs["git_commit"]).endswith("-dirty"))


def test_analysis_label_rules(tmp_path):
    (tmp_path / "protocols").mkdir()
    f = tmp_path / "protocols" / "x.md"
    f.write_text("rule\n")
    attrs = protocol_attrs("protocols/x.md", tmp_path)
    assert attrs["protocol_commit"] in ("uncommitted", "unknown")
    full = xr.Dataset(attrs={**attrs, "config": json.dumps({"quick": False})})
    assert analysis_label(full, "protocols/x.md", tmp_path).startswith("confirmatory (protocols/x.md, sha256 ")
    # negative controls: no protocol, another protocol, a quick design, the file edited after the run
    assert analysis_label(full, None, tmp_path) == "exploratory"
    assert analysis_label(full, "protocols/y.md", tmp_path) == "exploratory"
    quick = full.assign_attrs(config=json.dumps({"quick": True}))
    assert analysis_label(quick, "protocols/x.md", tmp_path) == "exploratory"
    dirty = full.assign_attrs(git_commit="0123abcd-dirty")
    assert analysis_label(dirty, "protocols/x.md", tmp_path) == \
        "exploratory (the protocols/x.md design run from a modified work tree)"
    # a second protocol recorded under another prefix is confirmatory on its own hash
    (tmp_path / "protocols" / "z.md").write_text("second rule\n")
    both = full.assign_attrs(**protocol_attrs("protocols/z.md", tmp_path, prefix="protocol_two"))
    assert recorded_protocols(both.attrs) == {"protocols/x.md": "protocol", "protocols/z.md": "protocol_two"}
    assert analysis_label(both, "protocols/z.md", tmp_path).startswith("confirmatory (protocols/z.md, sha256 ")
    (tmp_path / "protocols" / "z.md").write_text("second rule, edited after the run\n")
    assert analysis_label(both, "protocols/z.md", tmp_path) == "exploratory"
    assert analysis_label(both, "protocols/x.md", tmp_path).startswith("confirmatory (protocols/x.md")
    with pytest.raises(ValueError, match="'prefix'"):
        protocol_attrs("protocols/z.md", tmp_path, prefix="scaled")
    f.write_text("rule, edited after the run\n")
    assert analysis_label(full, "protocols/x.md", tmp_path) == "exploratory"


@pytest.mark.deterministic(reason="argument check before anything runs; no random draw")
def test_confirmatory_design_on_a_modified_tree_exits_2_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """`simkit run hard_regime` (its pre-registered design) from a modified work tree: one line naming
    the protocol and the changed files, exit 2, nothing written; the quick design is not confirmatory."""
    import simkit.runner.provenance as prov
    from simkit.claims.protocol import confirmatory_protocols
    from simkit.cli import main
    from simkit.runner import get_study, resolve_config
    study = get_study("hard_regime")
    assert confirmatory_protocols(study, resolve_config(study, {})) == ["protocols/hard_regime_maxt.md"]
    assert confirmatory_protocols(study, resolve_config(study, {}, quick=True)) == []
    monkeypatch.setattr(prov, "changed_files", lambda: ["simkit/x.py"])
    out = tmp_path / "h.nc"
    assert main(["run", "hard_regime", "--out", str(out), "--report", str(tmp_path / "h.pdf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "protocols/hard_regime_maxt.md" in err[0] and "simkit/x.py" in err[0], err
    assert "--allow-dirty" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_dirty_run_records_the_changed_files_and_the_diff_hash(monkeypatch):
    import simkit.runner.run as run
    monkeypatch.setattr(run, "changed_files", lambda: ["simkit/x.py"])
    monkeypatch.setattr(run, "diff_sha256", lambda: "ab" * 32)
    assert run._dirty_attrs("0123-dirty") == {"git_changed_files": '["simkit/x.py"]', "git_diff_sha256": "ab" * 32}
    assert run._dirty_attrs("0123") == {}


def test_validate_keeps_confirmatory_rows_apart():
    base = {"statistic": "s", "estimate": 1.0, "estimate_mcse": 0.1, "false_fail_rate": 0.01, "detail": ""}
    checks = [{**base, "claim": "C6", "study": "generalisation", "verdict": "fail", "analysis": "exploratory"},
              {**base, "claim": "C6", "study": "dimension", "verdict": "pass",
               "analysis": "confirmatory (protocols/dimension.md, sha256 abc)"},
              {**base, "claim": "C1", "study": "rate_k", "verdict": "pass", "analysis": "exploratory"}]
    t = combine_checks(checks)
    claims = list(t["claim"].values)
    assert claims.index("C6 confirmatory") == claims.index("C6") + 1
    assert str(t["verdict"].sel(claim="C6").values) == "fail"
    assert str(t["verdict"].sel(claim="C6 confirmatory").values) == "pass"
    assert str(t["analysis"].sel(claim="C6 confirmatory").values).startswith("confirmatory (protocols/dimension.md")
    assert str(t["analysis"].sel(claim="C1").values) == "exploratory"
    assert list(t["check_analysis"].values)[1].startswith("confirmatory")
    assert np.isnan(float(t["false_fail_rate"].sel(claim="C4")))  # not studied


@pytest.mark.deterministic(reason="labels of committed datasets; no random draw")
def test_validate_from_the_committed_data_marks_confirmatory_rows(tmp_path):
    """simkit validate --from-data data: nothing runs; a committed confirmatory C6 run from a clean tree
    gives a 'C6 confirmatory' row with the protocol's hash, apart from the exploratory C6 row."""
    from simkit.claims.validate import run_validation
    t = run_validation(studies=["dimension", "generalisation"], from_data=ROOT / "data", out=tmp_path / "v.nc",
                       report=None, progress=False)
    claims = list(t["claim"].values)
    assert "C6" in claims
    assert str(t["analysis"].sel(claim="C6").values) == "exploratory"
    for name, claim in (("dimension", "C6"), ("generalisation", "C3")):
        dirty = str(read_dataset(ROOT / "data" / f"{name}.nc").attrs["git_commit"]).endswith("-dirty")
        # a committed run from a modified work tree is exploratory, its rule's row with the others
        assert (f"{claim} confirmatory" in claims) == (not dirty), name
    if "C6 confirmatory" in claims:
        sha = hashlib.sha256((ROOT / "protocols" / "dimension.md").read_bytes()).hexdigest()
        assert str(t["analysis"].sel(claim="C6 confirmatory").values) == \
            f"confirmatory (protocols/dimension.md, sha256 {sha[:12]})"
    with pytest.raises(ValueError, match="'--from-data' must hold a dataset of every study"):
        run_validation(studies=["dimension"], from_data=tmp_path, out=tmp_path / "w.nc", report=None)


@pytest.mark.deterministic(reason="argument check; nothing runs")
def test_cli_from_data_without_the_datasets_exits_2_and_writes_nothing(tmp_path, capsys):
    from simkit.cli import main
    assert main(["validate", "--from-data", str(tmp_path), "--out", str(tmp_path / "v.nc"),
                 "--report", str(tmp_path / "v.pdf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'--from-data' must hold a dataset of every study" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.deterministic(reason="which calibration files a validation reads; no random draw")
def test_validate_from_data_reads_the_calibrations_beside_the_data(tmp_path, monkeypatch):
    """With --from-data DIR the calibrations come from DIR/calibration, whatever the working directory;
    an explicit empty directory shows none."""
    from simkit.claims.validate import run_validation
    monkeypatch.chdir(tmp_path)  # no data/calibration here
    t = run_validation(studies=["rate_k"], from_data=ROOT / "data", out=tmp_path / "v.nc", report=None, progress=False)
    assert json.loads(t.attrs["calibration_datasets"]) == {"rate_k": "rate_k_full.nc"}
    (tmp_path / "none").mkdir()
    t = run_validation(studies=["rate_k"], from_data=ROOT / "data", out=tmp_path / "w.nc", report=None, progress=False,
                       calibration=tmp_path / "none")
    assert json.loads(t.attrs["calibration_datasets"]) == {}


@pytest.mark.deterministic(reason="argument check; nothing runs")
def test_cli_calibration_that_is_no_directory_exits_2_and_writes_nothing(tmp_path, capsys):
    from simkit.cli import main
    assert main(["validate", "--from-data", str(ROOT / "data"), "--calibration", str(tmp_path / "missing"),
                 "--out", str(tmp_path / "v.nc"), "--report", str(tmp_path / "v.pdf")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'--calibration' must be a directory" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.deterministic(reason="which calibration files a validation reads; no random draw")
def test_cli_validate_says_when_no_calibration_was_found(tmp_path, capsys, monkeypatch):
    """The closing line names the absence of calibrations (an empty --calibration), and not their presence."""
    import simkit.claims.validate as validate
    import simkit.runner as runner
    from simkit.cli import main
    monkeypatch.setattr(validate, "study_names", lambda: ["rate_k"])  # one study: fast
    monkeypatch.setattr(runner, "study_names", lambda: ["rate_k"])
    (tmp_path / "none").mkdir()
    common = ["validate", "--from-data", str(ROOT / "data"), "--no-progress"]
    main(common + ["--out", str(tmp_path / "a.nc"), "--report", str(tmp_path / "a.pdf")])
    wrote = [line for line in capsys.readouterr().out.splitlines() if line.startswith("simkit: wrote")]
    assert wrote == [f"simkit: wrote {tmp_path / 'a.nc'} and {tmp_path / 'a.pdf'}"]
    main(common + ["--calibration", str(tmp_path / "none"), "--out", str(tmp_path / "b.nc"), "--report",
                   str(tmp_path / "b.pdf")])
    wrote = [line for line in capsys.readouterr().out.splitlines() if line.startswith("simkit: wrote")]
    assert len(wrote) == 1 and wrote[0].endswith("(no calibration of these studies found: empirical rates not shown)")


@pytest.mark.deterministic(reason="string parsing of fixed labels")
def test_label_protocol_reads_back_analysis_label():
    from simkit.claims.protocol import label_protocol
    assert label_protocol("confirmatory (protocols/onset.md, sha256 58fec7c52e54)") == ("protocols/onset.md",
                                                                                         "sha256 58fec7c52e54")
    assert label_protocol("exploratory") is None
    assert label_protocol("exploratory (the protocols/onset.md design run from a modified work tree)") is None
