"""simkit.claims.calibrate and ``simkit calibrate`` on a tiny in-test study with exact p-values.

The study draws ``n_blocks = 2`` standard normal values (one per block) and tests mean = 0:

* ``t`` -- Student t on 1 df, alpha 0.05: its p-value is exactly Uniform(0, 1) (the null control);
* ``z`` -- the same statistic against the *normal* critical value, alpha 0.01: with 1 df it rejects
  with probability P(|T_1| > 2.576) = 0.2357, not 0.01 (the positive control);
* a second check of the same claim that is deterministic (no rate).

Statistical budget of this file (seeds 1..60 fixed before the tests were first run, never re-seeded):

* null control, exact two-sided binomial test of the t row's rejections at level 1e-3: false-failure
  rate <= 1e-3 (the exact test is conservative); it detects a true rate of 0.2 (vs 0.05) with power
  0.79, 0.25 with power 0.95 (60 seeds);
* null control, KS p-value of the t row >= 1e-3: false-failure rate 1e-3 (exact for a continuous
  p-value); it detects a sup-distance from uniform of 0.25 (the 1e-3 critical value for 60 seeds);
* positive control, the z row's Clopper-Pearson 95% lower limit above 0.01: fails (misses) with
  probability P(Bin(60, 0.2357) <= 2) = 1.9e-5;

total about 2.0e-3. Every other assertion is deterministic (bit-identical resume, schema, CLI).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from simkit.claims.calibrate import (ALTERNATIVES, OVERLAP_RTOL, Alternative, Calibration, calibrate, calibration_rates, check_labels,
                              clopper_pearson, combine)
from simkit.cli import main
from simkit.runner import Check, Param, Study, Var, read_dataset, results_identical, run_study
from simkit.claims.validate import combine_checks, empirical_text

from _cf import compliance

SEEDS = 60
T_ALPHA, Z_ALPHA = 0.05, 0.01


def _stat(ds):
    x = ds["raw_x"].values[0]
    return x.mean() / (x.std(ddof=1) / np.sqrt(x.size)), x.size - 1


def _pvalues(ds):
    t, df = _stat(ds)
    return {"t": (float(2 * stats.t.sf(abs(t), df)), T_ALPHA), "z": (float(2 * stats.norm.sf(abs(t))), Z_ALPHA)}


def _evaluate(ds):
    p = _pvalues(ds)["t"][0]
    return {"estimate": float(_stat(ds)[0]), "estimate_mcse": 0.0, "verdict": "pass" if p >= T_ALPHA else "fail"}


def _finite(ds):
    ok = bool(np.all(np.isfinite(ds["raw_x"].values)))
    return {"estimate": float(ok), "estimate_mcse": 0.0, "verdict": "pass" if ok else "fail"}


class TinyT(Study):
    name = "tiny-t"
    claim = "demo"
    title = "t test of normal draws"
    cell_dim = "setting"
    params = {"n_blocks": Param("n_blocks", int, 2, "normal draws (blocks)", low=2, high=1000, quick=2)}
    schema = {"setting": Var(("setting",), "setting", "1", "one"),
              "raw_x": Var(("setting", "block"), "standard normal draw", "1", "one per block")}
    checks = (Check("demo", "mean = 0 (Student t)", _evaluate, T_ALPHA, _pvalues),
              Check("demo", "deterministic: every draw finite", _finite, None))

    def cells(self, cfg):
        return [{"setting": "normal"}]

    def block_dims(self, cfg):
        return {"x": ()}, {}

    def generate(self, cell, cfg, prep, rng):
        return {"x": np.array(rng.standard_normal())}


STUDY = TinyT()


def _same(a, b) -> bool:
    """results_identical, except git_commit (others commit to the shared checkout during a test run)."""
    a, b = a.copy(), b.copy()
    for d in (a, b):
        d.attrs.pop("git_commit", None)
    return results_identical(a, b)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    out = tmp_path_factory.mktemp("cal") / "tiny-t.nc"
    return calibrate(STUDY, seeds=SEEDS, out=out, progress=False), out


def _row(ds, name):
    return ds.sel(check=name)


# ----------------------------------------------------------------------------------------------
# the rates

@pytest.mark.statistical
@pytest.mark.false_fail(2e-5, reason="exact binomial test p >= 1e-5 (conservative) + KS p >= 1e-5 on exactly uniform p-values")
def test_exactly_uniform_pvalues_are_calibrated(calibrated):
    """Null control (budget: binomial 1e-5, KS 1e-5). Power at 60 seeds is low, as a null control's may be:
    KS detects a sup distance >= 0.64 with probability 0.999 (DKW-Massart) and the binomial test fails at 13 or
    more rejections of 60 (nominal 3); detection of a miscalibrated test is test_miscalibrated_test_is_detected's."""
    ds, _ = calibrated
    t = _row(ds, "demo.1:t")
    assert int(t["n_valid"]) == SEEDS and int(t["n_missing"]) == 0
    assert float(t["nominal_rate"]) == T_ALPHA
    assert float(t["binom_pvalue"]) >= 1e-5, float(t["empirical_rate"])
    assert float(t["ks_pvalue"]) >= 1e-5
    # the interval is the Clopper-Pearson one (Beta quantiles)
    k, n = int(t["n_reject"]), int(t["n_valid"])
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="exact")
    assert np.isclose(float(t["empirical_rate_low"]), ci.low, rtol=1e-9, atol=1e-12)
    assert np.isclose(float(t["empirical_rate_high"]), ci.high, rtol=1e-9)
    # the check's verdict fails exactly when its t test rejects
    v = _row(ds, "demo.1:verdict")
    np.testing.assert_array_equal(v["reject"].values, t["reject"].values)
    assert float(v["nominal_rate"]) == T_ALPHA and np.isnan(float(v["ks_pvalue"]))


@pytest.mark.statistical
@pytest.mark.false_fail(1.9e-5, reason="the Clopper-Pearson lower limit misses a true rate of 0.2357 with probability 1.9e-5 (binomial, stated in the test)")
def test_miscalibrated_test_is_detected(calibrated):
    """Positive control: the normal critical value on 1 df rejects at 0.2357, not 0.01 (miss 1.9e-5)."""
    ds, _ = calibrated
    z = _row(ds, "demo.1:z")
    assert float(z["nominal_rate"]) == Z_ALPHA
    assert float(z["empirical_rate_low"]) > Z_ALPHA, (int(z["n_reject"]), int(z["n_valid"]))


@pytest.mark.deterministic(reason="the deterministic demo check never rejects; no tolerance")
def test_deterministic_check_has_no_rate(calibrated):
    ds, _ = calibrated
    d = _row(ds, "demo.2:verdict")
    assert np.isnan(float(d["nominal_rate"])) and np.isnan(float(d["binom_pvalue"]))
    assert int(d["n_reject"]) == 0 and float(d["empirical_rate"]) == 0.0
    assert str(d["check_kind"].values) == "verdict" and int(d["check_index"]) == 1


@pytest.mark.deterministic(reason="labels, shapes and reject = (p < alpha) bookkeeping, for any draw")
def test_rows_statistics_and_labels(calibrated):
    ds, _ = calibrated
    assert check_labels(STUDY) == ["demo.1", "demo.2"]
    assert list(ds["check"].values) == ["demo.1:t", "demo.1:z", "demo.1:verdict", "demo.2:verdict"]
    assert list(ds["check_kind"].values) == ["test", "test", "verdict", "verdict"]
    assert ds["statistic"].dims == ("seed", "check") and list(ds["seed"].values) == list(range(1, SEEDS + 1))
    # the p-values are in (0, 1]; reject is p < alpha
    p = ds["statistic"].sel(check="demo.1:t").values
    assert np.all((p > 0) & (p <= 1))
    np.testing.assert_array_equal(ds["reject"].sel(check="demo.1:t").values, (p < T_ALPHA).astype(float))


@pytest.mark.deterministic(reason="equality of the same seed's numbers in two runs; no tolerance")
def test_each_seed_is_the_study_run_at_that_seed(calibrated, tmp_path):
    """Seed s of the calibration is exactly the study run with seed s (same task seeds)."""
    ds, _ = calibrated
    for s in (1, 37):
        cfg = {"n_blocks": 2, "quick": True, "seed": s}
        run = run_study(STUDY, cfg, tmp_path / f"run{s}.nc", progress=False).dataset
        assert float(ds["statistic"].sel(seed=s, check="demo.1:t")) == _pvalues(run)["t"][0]
        assert float(ds["statistic"].sel(seed=s, check="demo.1:verdict")) == _evaluate(run)["estimate"]


@pytest.mark.deterministic(reason="file round trip and attributes; no tolerance")
def test_dataset_file_cf_attributes_and_round_trip(calibrated):
    ds, out = calibrated
    back = read_dataset(out)
    assert _same(back, ds)
    for name in list(back.data_vars) + list(back.coords):
        at = back[name].attrs
        assert at.get("units") and at.get("long_name") and "description" in at, name
    for key in ("Conventions", "title", "history", "source", "references", "study", "target_study", "n_seeds",
                "first_seed", "command", "git_commit", "config"):
        assert key in back.attrs, key
    assert back.attrs["Conventions"] == "CF-1.11" and back.attrs["study"] == "calibrate-tiny-t"
    assert int(back.attrs["n_seeds"]) == SEEDS
    for name in ("statistic", "reject", "empirical_rate", "nominal_rate", "ks_pvalue"):
        np.testing.assert_array_equal(back[name].values, ds[name].values)
    assert not list(out.parent.glob(".*partial")) and not list(out.parent.glob(".*.seeds"))  # cleaned up


# ----------------------------------------------------------------------------------------------
# resume

def test_resume_after_stop_after_is_bit_identical(tmp_path):
    ref = calibrate(STUDY, seeds=5, first_seed=101, out=tmp_path / "a" / "c.nc", progress=False)
    out = tmp_path / "b" / "c.nc"
    with pytest.raises(KeyboardInterrupt):
        calibrate(STUDY, seeds=5, first_seed=101, out=out, progress=False, stop_after=4)
    assert not out.exists() and list(out.parent.glob(".c.nc.*.partial"))
    again = calibrate(STUDY, seeds=5, first_seed=101, out=out, progress=False)
    assert int(again.attrs["resumed_tasks"]) == 5  # the probe's seed and the 4 tasks before the stop
    assert _same(again, ref)
    assert _same(read_dataset(out), read_dataset(tmp_path / "a" / "c.nc"))


@pytest.mark.deterministic(reason="task counts and a clock; no sampling")
def test_first_seed_counts_in_the_wall_time_and_is_not_resumed(tmp_path, monkeypatch):
    """The first seed runs alone before the others (it fixes the check dimension): in a fresh run it is
    this invocation's work, so it is not counted as resumed, and its time is in wall_time_s."""
    import simkit.claims.calibrate as cal
    real = cal._first_names

    def slow(*args):
        names, s, n = real(*args)
        return names, s + 1000.0, n  # as if the first seed had taken 1000 s more

    monkeypatch.setattr(cal, "_first_names", slow)
    ds = calibrate(STUDY, seeds=2, first_seed=3, out=tmp_path / "c.nc", progress=False)
    assert int(ds.attrs["resumed_tasks"]) == 0 and float(ds.attrs["wall_time_s"]) >= 1000.0


def test_fewer_seeds_reuse_the_checkpoint_of_an_interrupted_run(tmp_path):
    """The checkpoint does not depend on the number of seeds: seeds 1..3 of an interrupted run of 6
    give the dataset of 3 seeds without running anything."""
    out = tmp_path / "c.nc"
    # the first seed ran alone; then the engine submits every preparation before the blocks:
    # new tasks: the 6 preparations, seed 2, seed 3
    with pytest.raises(KeyboardInterrupt):
        calibrate(STUDY, seeds=6, first_seed=7, out=out, progress=False, stop_after=8)
    three = calibrate(STUDY, seeds=3, first_seed=7, out=out, progress=False)
    assert int(three.attrs["resumed_tasks"]) == 6 and list(three["seed"].values) == [7, 8, 9]
    assert _same(three, calibrate(STUDY, seeds=3, first_seed=7, out=tmp_path / "fresh.nc", progress=False))


# ----------------------------------------------------------------------------------------------
# validate, the alternative, the CLI

@pytest.mark.deterministic(reason="bookkeeping of given rates; no tolerance")
def test_calibration_rates_and_the_validation_columns(calibrated):
    ds, out = calibrated
    rates = calibration_rates("tiny-t", out.parent)
    v = _row(ds, "demo.1:verdict")
    assert rates[0]["rate"] == float(v["empirical_rate"]) and rates[0]["n"] == SEEDS
    assert rates[1]["rate"] == 0.0
    # the claim fails when any of its verdicts fails: here exactly when check 1 does
    assert rates["demo"]["rate"] == rates[0]["rate"] and rates["demo"]["low"] == rates[0]["low"]
    assert calibration_rates("not-calibrated", out.parent) == {}
    row = {"claim": "C1", "study": "tiny-t", "statistic": "s", "estimate": 0.0, "estimate_mcse": 0.0,
           "false_fail_rate": 0.05, "verdict": "pass", "detail": ""}
    # a row's rate: seeds on which any of its rated checks failed (here 2 of the 50 that both decided)
    a = np.zeros(52)
    b = np.zeros(52)
    a[[3, 7]], b[[7]], b[[50, 51]] = 1.0, 1.0, np.nan
    cal = {"empirical_false_fail": 0.04, "empirical_false_fail_low": 0.01, "empirical_false_fail_high": 0.1}
    table = combine_checks([{**row, **cal, "calibration_rejects": a}, {**row, **cal, "calibration_rejects": b},
                            {**row, "claim": "C2"}])
    lo, hi = clopper_pearson(2, 50)
    assert float(table["empirical_false_fail"].sel(claim="C1")) == 2 / 50
    assert float(table["empirical_false_fail_low"].sel(claim="C1")) == lo
    assert float(table["empirical_false_fail_high"].sel(claim="C1")) == hi
    assert np.isnan(float(table["empirical_false_fail"].sel(claim="C2")))  # not calibrated
    np.testing.assert_array_equal(table["check_empirical_false_fail_low"].values, [0.01, 0.01, np.nan])
    # a rated check calibrated only on another design: its own row says so, the claim row shows none
    other = combine_checks([{**row, **cal, "calibration_rejects": a, "calibration_other_design": "quick",
                             "calibration_stated": 0.3}])
    assert np.isnan(float(other["empirical_false_fail"].values[0]))
    assert empirical_text(other, 0, "check_") == "0.040 [0.010, 0.100] (quick design; stated there 0.3)"


def test_sqrt_k_alternative_scales_the_gap_blocks_by_sqrt_k():
    alt = ALTERNATIVES["sqrt-k"]
    k = np.array([1, 2, 4, 8])
    g = np.arange(24.0).reshape(2, 3, 4) + 1
    raw = xr.Dataset({"raw_gap_cv": (("setting", "block", "k"), g), "raw_dgap_cv": (("setting", "block", "k"), g)},
                     coords={"k": k})
    out = alt.transform(raw)
    np.testing.assert_array_equal(out["raw_gap_cv"].values, g * np.sqrt(k))
    np.testing.assert_array_equal(out["raw_dgap_cv"].values, g)  # every other variable unchanged
    with pytest.raises(ValueError, match="'alternative' 'sqrt-k' needs the raw variable 'raw_gap_cv'"):
        calibrate(STUDY, seeds=2, alternative="sqrt-k", out="/nonexistent-dir-never-written/x.nc")
    with pytest.raises(ValueError, match="'alternative' must be one of sqrt-k"):
        calibrate(STUDY, seeds=2, alternative="cubic")
    assert isinstance(alt, Alternative)


@pytest.mark.parametrize("bad", [{"seeds": 0}, {"seeds": 2.5}, {"seeds": True}, {"first_seed": -1}])
def test_calibrate_argument_errors(bad):
    kw = {"seeds": 2, **bad}
    with pytest.raises(ValueError, match=f"'{next(iter(bad))}' must be an integer >= "):
        calibrate(STUDY, **kw)


@pytest.mark.parametrize("args, message", [
    (["nosuchstudy"], "unknown study 'nosuchstudy'"),
    (["rate_k", "--seeds", "0"], "'--seeds' must be an integer in [1, 2**63)"),
    (["rate_k", "--seeds", "many"], "'--seeds' must be an integer >= 1"),
    (["rate_k", "--first-seed", "-3"], "'--first-seed' must be an integer in [0, 2**63)"),
    (["rate_k", "--first-seed", str(2**63 - 1), "--seeds", "5"], "'--first-seed' + '--seeds' must be <= 2**63"),
    (["rate_k", "--out", "x.csv"], "'--out' must end in .nc"),
    (["rate_k", "--report", "x.nc"], "'--report' must end in .pdf"),
    (["rate_k", "--set", "k_max=24"], "'k_max' must be a power of two"),
    (["rate_k", "--set", "nosuch=3"], "unknown parameter 'nosuch' for study rate_k"),
    (["rate_k", "--alternative", "cubic"], "'--alternative' must be one of sqrt-k"),
    (["rademacher", "--alternative", "sqrt-k"], "needs the raw variable 'raw_gap_cv'"),
    (["rate_k", "--scheduler", "tcp://127.0.0.1:1"], "'--scheduler' 'tcp://127.0.0.1:1' is not reachable"),
])
def test_cli_bad_input_one_line_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", *args, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("simkit: error: ") and message in err, err
    assert not any(tmp_path.rglob("*"))  # nothing written


def test_cli_output_busy_exit_2(tmp_path, capsys):
    from simkit.runner import RunLock
    out = tmp_path / "tiny.nc"
    with RunLock(out):
        code = main(["calibrate", "rate_k", "--seeds", "1", "--out", str(out), "--report", str(tmp_path / "r.pdf"),
                     "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is being written by a running simkit" in err


def test_meta_study_config_does_not_hold_the_number_of_seeds():
    a = Calibration(STUDY, {"n_blocks": 2, "quick": True, "seed": 1}, range(1, 4))
    b = Calibration(STUDY, {"n_blocks": 2, "quick": True, "seed": 5}, range(1, 400))
    assert a.config(1) == b.config(1) and "seeds" not in json.dumps(a.config(1))
    assert a.name == "calibrate-tiny-t" and a.cells(a.config(1)) == [{"seed": 1}, {"seed": 2}, {"seed": 3}]


@pytest.mark.slow
def test_cli_runs_rate_k_with_the_power_rows(tmp_path, capsys):
    """End to end on a tiny rate_k design (slow: a few seconds per seed)."""
    sets = ["--set", "settings=uniform-d3", "--set", "k_max=256", "--set", "n_blocks=8", "--set", "block_anchors=64",
            "--set", "pilot_blocks=1"]
    out, rep = tmp_path / "cal" / "rate_k.nc", tmp_path / "calibration.pdf"
    code = main(["calibrate", "rate_k", "--quick", "--seeds", "2", *sets, "--alternative", "sqrt-k", "--out", str(out),
                 "--report", str(rep), "--no-progress"])
    assert code == 0 and out.exists() and rep.exists()
    ds = read_dataset(out)
    assert "power:C1:uniform-d3:slope" in list(ds["check"].values)
    assert set(ds["check_kind"].values) == {"test", "verdict", "power-test", "power-verdict"}


RATE_K_TINY = {"settings": "uniform-d3", "k_max": 256, "n_blocks": 8, "block_anchors": 64, "pilot_blocks": 1}


@pytest.mark.slow
def test_dask_gives_the_in_process_dataset(tmp_path):
    """Seeds as tasks on a 2-worker LocalCluster (one Numba thread each) against in-process (every core)."""
    from distributed import Client, LocalCluster

    from simkit.runner import get_study
    study = get_study("rate_k")
    ref = calibrate(study, seeds=3, overrides=RATE_K_TINY, out=tmp_path / "a.nc", progress=False,
                    alternative="sqrt-k")
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                      scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
                      env={"NUMBA_NUM_THREADS": "1"}) as cluster, Client(cluster) as client:
        on_dask = calibrate(study, seeds=3, overrides=RATE_K_TINY, out=tmp_path / "b.nc", progress=False,
                            alternative="sqrt-k", executor=client)
    assert on_dask.attrs["engine"] == "dask" and ref.attrs["engine"] == "in-process"
    assert _same(ref, on_dask)


def test_validate_puts_the_empirical_rate_beside_the_stated_one(calibrated, tmp_path, monkeypatch):
    """run_validation reads <calibration>/<study>.nc (here the in-test study, through a patched registry)."""
    from simkit.claims import validate
    ds, out = calibrated
    monkeypatch.setattr(validate, "get_study", lambda name: STUDY)
    table = validate.run_validation(studies=["tiny-t"], out=tmp_path / "validation.nc", report=None,
                                    progress=False, calibration=out.parent)
    rates = calibration_rates("tiny-t", out.parent)
    for j in (0, 1):
        assert float(table["check_empirical_false_fail"].values[j]) == rates[j]["rate"]
        assert float(table["check_empirical_false_fail_high"].values[j]) == rates[j]["high"]
    assert float(table["check_false_fail_rate"].values[0]) == T_ALPHA
    assert np.isnan(float(table["check_false_fail_rate"].values[1]))  # deterministic
    # 'demo' is none of C1..C7, so every claim row is uncalibrated (claim rows: test_calibration_rates_...)
    assert np.all(np.isnan(read_dataset(tmp_path / "validation.nc")["empirical_false_fail"].values))
    assert validate.empirical_text(table, 0, "check_").startswith(f"{rates[0]['rate']:.3f} [")


def test_cli_ctrl_c_exits_130_keeping_finished_seeds(tmp_path, capsys, monkeypatch):
    """Ctrl-C (here: KeyboardInterrupt after the first new tasks) ends with 130; the seeds finished so far
    stay in the checkpoint and the same call resumes from them."""
    import simkit.claims.calibrate as cal
    real = cal.calibrate
    out = tmp_path / "c.nc"
    monkeypatch.setattr(cal, "calibrate", lambda study, **kw: real(STUDY, **{**kw, "stop_after": 3}))
    code = main(["calibrate", "rate_k", "--seeds", "4", "--out", str(out), "--report", str(tmp_path / "r.pdf"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 130 and "calibration interrupted; finished seeds are kept" in err
    assert not out.exists()
    again = real(STUDY, seeds=4, out=out, progress=False, quick=False)
    assert int(again.attrs["resumed_tasks"]) == 4  # seed 1 (first), prep 2, seed 2, prep 3


def test_resumed_calibration_counts_the_tasks_its_seeds_resumed(tmp_path, capsys, monkeypatch):
    """Reproduction: Ctrl-C while a seed's own run is half done (here: KeyboardInterrupt in the target's
    second block of the second seed), then the same ``simkit calibrate`` command: the seed's run resumed
    its finished tasks from ``.<out>.seeds/`` but the dataset recorded only the calibration's own resumed
    tasks, and the interruption printed two lines. Now: one line, exit 130; the resumed calibration's
    ``resumed_tasks`` counts every checkpoint file left on disk (its own and its seeds'), and the dataset
    is that of an uninterrupted calibration."""
    import simkit.claims.calibrate as cal
    real_calibrate, real_generate = cal.calibrate, TinyT.generate
    calls = []

    def interrupted(self, cell, cfg, prep, rng):
        calls.append(1)
        if len(calls) == 4:  # the first seed's two blocks, then the second seed's first block are done
            raise KeyboardInterrupt
        return real_generate(self, cell, cfg, prep, rng)

    out = tmp_path / "cal" / "c.nc"
    argv = ["calibrate", "rate_k", "--seeds", "3", "--out", str(out), "--report", str(tmp_path / "r.pdf"),
            "--no-progress"]
    monkeypatch.setattr(cal, "calibrate", lambda study, **kw: real_calibrate(STUDY, **kw))
    monkeypatch.setattr(TinyT, "generate", interrupted)
    capsys.readouterr()
    assert main(argv) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simkit: calibration interrupted; finished seeds are kept"), err
    assert not out.exists()
    own = [p for p in out.parent.glob(".c.nc.*.partial/*.npz")]
    seeds = [p for p in out.parent.glob(".c.nc.seeds/.*.partial/*.npz")]
    assert len(seeds) == 2  # the second seed's run: its preparation and first block
    monkeypatch.setattr(TinyT, "generate", real_generate)
    assert main(argv) == 0
    ds = read_dataset(out)
    assert int(ds.attrs["resumed_tasks"]) == len(own) + len(seeds)
    ref = real_calibrate(STUDY, seeds=3, first_seed=1, quick=False, out=tmp_path / "ref" / "c.nc", progress=False)
    assert _same(ds, ref)
    capsys.readouterr()


def test_simkit_report_of_a_calibration_dataset(calibrated, tmp_path, capsys):
    _, out = calibrated
    pdf = tmp_path / "cal.pdf"
    assert main(["report", str(out), "--out", str(pdf)]) == 0
    assert pdf.read_bytes().startswith(b"%PDF")


_CAL_DIR = Path(__file__).resolve().parents[2] / "data" / "calibration"
CALIBRATION_FILES = (sorted(_CAL_DIR.glob("*.nc")) + sorted(_CAL_DIR.glob("archive/*.nc"))  # superseded runs too
                     + sorted(_CAL_DIR.glob("parts/*.nc")))  # the parts of combined calibrations


def test_calibration_dataset_passes_the_cf_checker(calibrated):
    proc = compliance(calibrated[1])
    assert proc.returncode == 0, proc.stdout[-3000:]


@pytest.mark.parametrize("path", CALIBRATION_FILES, ids=[p.name for p in CALIBRATION_FILES])
@pytest.mark.deterministic(reason="consistency of committed files (counts equal sums); no tolerance")
def test_committed_calibration_datasets(path):
    """Every committed data/calibration/<study>.nc: CF-1.11 strict, and its rates are those of its rows."""
    assert compliance(path).returncode == 0
    ds = read_dataset(path)
    assert int(ds.attrs["n_seeds"]) == ds.sizes["seed"] >= 1
    np.testing.assert_array_equal(ds["n_reject"].values, np.nansum(ds["reject"].values, axis=0).astype(int))
    np.testing.assert_array_equal(ds["n_valid"].values, np.isfinite(ds["reject"].values).sum(axis=0))


COMBINED_FILES = [p for p in sorted(_CAL_DIR.glob("*.nc")) if "combined_from" in read_dataset(p).attrs]


@pytest.mark.parametrize("path", COMBINED_FILES, ids=[p.name for p in COMBINED_FILES])
@pytest.mark.deterministic(reason="a committed dataset recomputed from its committed parts; exact but for the last bits of floats")
def test_committed_combinations_are_those_of_their_parts(path):
    """A committed combined calibration (simkit calibrate --combine) is, variable by variable, the
    combination of its parts, which are committed in data/calibration/parts/."""
    ds = read_dataset(path)
    parts = [_CAL_DIR / "parts" / p["file"] for p in json.loads(ds.attrs["combined_from"])]
    again = combine(str(ds.attrs["target_study"]), parts, write=False)
    for v in list(ds.data_vars) + list(ds.coords):
        # values, dimensions and units; the schema's description text may have grown since (bound-test rows).
        # Counts, decisions and labels exactly; floating summaries (KS and binomial p-values, rates) to
        # 1e-10 relative with the same NaNs: scipy's KS p-value goes through NumPy's exp/log, whose SIMD
        # paths (AVX2, AVX-512/SVML) differ in the last bits, and CI found continuity's KS p-values
        # moved so on another machine (the decisions they feed never sit that close to alpha).
        assert again[v].dims == ds[v].dims, v
        if np.issubdtype(ds[v].dtype, np.floating):
            np.testing.assert_allclose(again[v].values, ds[v].values, rtol=1e-10, atol=0, equal_nan=True,
                                       err_msg=v)
        else:
            assert again[v].equals(ds[v]), v
        assert {a: again[v].attrs.get(a) for a in ("units", "long_name")} == \
            {a: ds[v].attrs.get(a) for a in ("units", "long_name")}, v
    assert again.attrs["overlap_seeds"] == ds.attrs["overlap_seeds"]


@pytest.mark.deterministic(reason="p-values of committed datasets recomputed; no sampling")
def test_setting_pvalues_reproduce_the_verdict_rules():
    """search_ce's and asymmetry's component p-values (simkit.stats.analysis.setting_pvalues) reject exactly where
    their verdict rules do: the slope interval at level 1 - alpha excludes -1, |c1 z| or |c2 t| beyond the
    Student t critical value, curve/dgap p below alpha. Checked on the committed default runs, and on a
    perturbed copy in which each rule is made to fire (the positive control)."""
    import xarray as xr
    from scipy import stats

    from studies import asymmetry, search_ce

    ds = xr.open_dataset("data/asymmetry.nc").load()
    n = ds.sizes["block"]
    zcrit = stats.t.isf(asymmetry.ALPHA / 2, n - 1)
    pv = asymmetry.C1_CHECK.pvalues(ds)
    labels = [str(s) for s in ds["setting_label"].values]
    assert len(pv) == 5 * len(labels)
    for i, s in enumerate(labels):
        lo, hi = ds["gap_slope_verdict_low"].values[i], ds["gap_slope_verdict_high"].values[i]
        assert (pv[f"{s}:slope"][0] < asymmetry.ALPHA) == (not lo <= -1.0 <= hi)
        assert (pv[f"{s}:c1"][0] < asymmetry.ALPHA) == (abs(ds["c1_z"].values[i]) > zcrit)
        assert (pv[f"{s}:c2"][0] < asymmetry.ALPHA) == (abs(ds["c2_t"].values[i]) > zcrit)
        assert pv[f"{s}:curve"][0] == ds["curve_p"].values[i]
    bad = ds.copy(deep=True)
    bad["c1_z"].values[0] = 1.01 * zcrit
    bad["c2_t"].values[1] = -1.01 * zcrit
    pb = asymmetry.C1_CHECK.pvalues(bad)
    assert pb[f"{labels[0]}:c1"][0] < asymmetry.ALPHA <= pb[f"{labels[0]}:c2"][0]
    assert pb[f"{labels[1]}:c2"][0] < asymmetry.ALPHA
    bad["c1_z"].values[2] = np.nan
    assert np.isnan(asymmetry.C1_CHECK.pvalues(bad)[f"{labels[2]}:c1"][0])

    sc = xr.open_dataset("data/search_ce.nc").load()
    pv = search_ce.C2_CHECK.pvalues(sc)
    zcrit_sc = stats.t.isf(search_ce.ALPHA / 2, sc.sizes["block"] - 1)
    for i, s in enumerate(str(x) for x in sc["setting_label"].values):
        lo, hi = sc["slope_verdict_low"].values[i], sc["slope_verdict_high"].values[i]
        assert (pv[f"{s}:slope"][0] < search_ce.ALPHA) == (not lo <= -1.0 <= hi)
        assert (pv[f"{s}:d1"][0] < search_ce.ALPHA) == (abs(sc["d1_z"].values[i]) > zcrit_sc)
        cp = sc["d_curve_p_bonferroni"].values[i]
        assert pv[f"{s}:curve"][0] == cp or (np.isnan(cp) and np.isnan(pv[f"{s}:curve"][0]))
    bad = sc.copy(deep=True)
    bad["d1_z"].values[0] = 1.01 * zcrit_sc
    assert search_ce.C2_CHECK.pvalues(bad)[f"{sc['setting_label'].values[0]}:d1"][0] < search_ce.ALPHA


@pytest.mark.deterministic(reason="file lookup; no sampling")
def test_calibration_path_prefers_the_design_that_ran(tmp_path):
    """A full-design row uses <study>_full.nc, and the quick calibration only when there is no full one; a
    quick row never uses the full calibration."""
    from simkit.claims.calibrate import calibration_path
    assert calibration_path("s", tmp_path) is None and calibration_path("s", tmp_path, full=True) is None
    (tmp_path / "s.nc").write_bytes(b"")
    assert calibration_path("s", tmp_path, full=True) == tmp_path / "s.nc"
    (tmp_path / "s_full.nc").write_bytes(b"")
    assert calibration_path("s", tmp_path, full=True) == tmp_path / "s_full.nc"
    assert calibration_path("s", tmp_path) == tmp_path / "s.nc"


# ----------------------------------------------------------------------------------------------
# combining calibrations of other seeds (--combine)

_SUMMARY = ("statistic", "reject", "stated_rate", "target_errors", "check_kind", "check_claim", "check_index",
            "check_reference", "nominal_rate", "n_valid", "n_missing", "n_reject", "empirical_rate",
            "empirical_rate_low", "empirical_rate_high", "binom_pvalue", "ks_pvalue", "cell_error", "cell_key")


@pytest.mark.deterministic(reason="equality of datasets computed two ways; no tolerance")
def test_combine_of_two_runs_is_the_run_of_all_their_seeds(tmp_path):
    """Seeds 1..6 and 5..10 run as two calibrations and combined give, variable by variable, the
    calibration of seeds 1..10 run at once (the overlap 5, 6 checked and counted once)."""
    ref = calibrate(STUDY, seeds=10, first_seed=1, out=tmp_path / "all.nc", progress=False)
    calibrate(STUDY, seeds=6, first_seed=1, out=tmp_path / "a.nc", progress=False)
    calibrate(STUDY, seeds=6, first_seed=5, out=tmp_path / "b.nc", progress=False)
    out = tmp_path / "c.nc"
    both = combine(STUDY, [tmp_path / "b.nc", tmp_path / "a.nc"], out=out)
    back = read_dataset(out)
    assert list(back["seed"].values) == list(range(1, 11))
    for v in _SUMMARY:
        assert back[v].identical(ref[v]), v
    assert back["check"].identical(ref["check"])
    assert back.attrs["seeds"] == "1..10" and back.attrs["overlap_seeds"] == "5..6"
    assert back.attrs["overlap_max_relative_difference"] == 0.0
    parts = json.loads(back.attrs["combined_from"])
    assert [p["seeds"] for p in parts] == ["5..10", "1..6"]
    assert json.loads(back.attrs["config"])["seed"] == 1 and both.attrs["n_seeds"] == 10


@pytest.mark.deterministic(reason="refusals on constructed inputs")
def test_combine_refuses_what_it_cannot_vouch_for(tmp_path):
    a = calibrate(STUDY, seeds=3, first_seed=1, out=tmp_path / "a.nc", progress=False)
    calibrate(STUDY, seeds=3, first_seed=3, out=tmp_path / "b.nc", progress=False)
    from simkit.runner import write_dataset
    # a seed whose numbers moved by more than rounding (positive control of the overlap check)
    bad = read_dataset(tmp_path / "b.nc")
    bad["statistic"].values[0, 0] *= 1 + 100 * OVERLAP_RTOL
    write_dataset(bad, tmp_path / "bad.nc")
    with pytest.raises(ValueError, match="seed 3 differs"):
        combine(STUDY, [tmp_path / "a.nc", tmp_path / "bad.nc"], write=False)
    # ... by rounding only: accepted, the difference reported
    ok = read_dataset(tmp_path / "b.nc")
    ok["statistic"].values[0, 0] *= 1 + 1e-13
    write_dataset(ok, tmp_path / "ok.nc")
    c = combine(STUDY, [tmp_path / "a.nc", tmp_path / "ok.nc"], write=False)
    assert 0 < c.attrs["overlap_max_relative_difference"] < OVERLAP_RTOL
    assert c["statistic"].sel(seed=3).identical(a["statistic"].sel(seed=3))  # the first part's row
    # another decision on the overlap
    flip = read_dataset(tmp_path / "b.nc")
    flip["reject"].values[0, 0] = 1.0 - flip["reject"].values[0, 0]
    write_dataset(flip, tmp_path / "flip.nc")
    with pytest.raises(ValueError, match="another decision"):
        combine(STUDY, [tmp_path / "a.nc", tmp_path / "flip.nc"], write=False)
    # another design
    other = calibrate(STUDY, seeds=2, first_seed=20, overrides={"n_blocks": 3}, out=tmp_path / "o.nc", progress=False)
    assert other.sizes["seed"] == 2
    with pytest.raises(ValueError, match="different designs"):
        combine(STUDY, [tmp_path / "a.nc", tmp_path / "o.nc"], write=False)
    with pytest.raises(ValueError, match="at least two"):
        combine(STUDY, [tmp_path / "a.nc"], write=False)


@pytest.mark.deterministic(reason="command-line bookkeeping")
def test_cli_combine_and_its_bad_input(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("simkit.claims.calibrate.get_study", lambda name: STUDY)
    monkeypatch.setattr("simkit.runner.get_study", lambda name: STUDY)
    calibrate(STUDY, seeds=2, first_seed=1, out=tmp_path / "a.nc", progress=False)
    calibrate(STUDY, seeds=2, first_seed=3, out=tmp_path / "b.nc", progress=False)
    out, rep = tmp_path / "c" / "tiny-t.nc", tmp_path / "c" / "cal.pdf"
    out.parent.mkdir()
    assert main(["calibrate", "tiny-t", "--combine", str(tmp_path / "a.nc"), str(tmp_path / "b.nc"), "--seeds", "5",
                 "--out", str(out), "--report", str(rep)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'--combine'" in err[0] and "--seeds" in err[0] and not out.exists()
    assert main(["calibrate", "tiny-t", "--combine", str(tmp_path / "a.nc"), str(tmp_path / "nope.nc"),
                 "--out", str(out), "--report", str(rep)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nope.nc" in err[0] and not out.exists()
    assert main(["calibrate", "tiny-t", "--combine", str(tmp_path / "a.nc"), str(tmp_path / "b.nc"),
                 "--out", str(out), "--report", str(rep)]) == 0
    assert read_dataset(out).sizes["seed"] == 4 and rep.exists()


@pytest.mark.deterministic(reason="attributes of a calibration; nothing runs")
def test_a_calibration_records_the_protocols_of_the_dataset_it_calibrates():
    """continuity records its protocol only at the protocol's own seed; its calibration (seedless target
    configuration) still records the protocol's hash, computed here from the file, as the dataset does."""
    import hashlib
    from simkit.runner import get_study, resolve_config
    root = Path(__file__).resolve().parents[2]
    study = get_study("continuity")
    cfg = resolve_config(study)
    sha = hashlib.sha256((root / "protocols" / "continuity.md").read_bytes()).hexdigest()
    assert study.attrs(cfg)["protocol_sha256"] == sha
    assert "protocol_sha256" not in study.attrs({**cfg, "seed": 1})  # another seed: not the registered run
    for given in (cfg, {k: v for k, v in cfg.items() if k != "seed"}):
        cal = Calibration(study, given, [1, 2])
        assert json.loads(cal.attrs({"seed": 1})["target_protocols"]) == {"protocol_sha256": sha}


@pytest.mark.deterministic(reason="refusal on constructed inputs")
def test_combine_refuses_parts_under_different_protocols(tmp_path):
    calibrate(STUDY, seeds=2, first_seed=1, out=tmp_path / "a.nc", progress=False)
    calibrate(STUDY, seeds=2, first_seed=3, out=tmp_path / "b.nc", progress=False)
    from simkit.runner import write_dataset
    other = read_dataset(tmp_path / "b.nc")
    other.attrs["target_protocols"] = json.dumps({"protocol_sha256": "0" * 64})
    write_dataset(other, tmp_path / "other.nc")
    assert combine(STUDY, [tmp_path / "a.nc", tmp_path / "b.nc"], write=False).sizes["seed"] == 4
    with pytest.raises(ValueError, match="different protocols"):
        combine(STUDY, [tmp_path / "a.nc", tmp_path / "other.nc"], write=False)


class TinyFails(TinyT):
    """TinyT whose draws raise at seed 2 (every block): a target run with failed tasks."""

    name = "tiny-fails"

    def generate(self, cell, cfg, prep, rng):
        if cfg["seed"] == 2:
            raise ValueError("draw refused at $seed$ 2\n  (a test)")
        return super().generate(cell, cfg, prep, rng)


@pytest.mark.deterministic(reason="recorded text of constructed failures; no sampling")
def test_the_errors_of_a_seeds_study_run_are_recorded_and_reported(tmp_path):
    """A seed whose study run had failed tasks keeps each task's error (cell, stage, block, exception)
    beside its count, the report quotes them, and a part written before the messages were kept
    combines as 'not recorded' where its count is positive."""
    ds = calibrate(TinyFails(), seeds=3, first_seed=1, out=tmp_path / "a.nc", progress=False)
    np.testing.assert_array_equal(ds["target_errors"].values, [0, 2, 0])
    msgs = [str(m) for m in ds["target_error_message"].values]
    assert msgs[0] == msgs[2] == ""
    assert msgs[1] == ('cell 0 ({"setting":"normal"}) block 0: ValueError: draw refused at $seed$ 2 (a test); '
                       'cell 0 ({"setting":"normal"}) block 1: ValueError: draw refused at $seed$ 2 (a test)')
    assert read_dataset(tmp_path / "a.nc")["target_error_message"].equals(ds["target_error_message"])
    from simkit.report.calibration import _error_lines
    assert _error_lines(ds).startswith(r' Seed 2: cell 0 ({"setting":"normal"}) block 0: ValueError: draw refused at \$seed\$')
    # an older part: no messages, one seed with a failed task
    calibrate(TinyFails(), seeds=2, first_seed=4, out=tmp_path / "b.nc", progress=False)
    from simkit.runner import write_dataset
    old = read_dataset(tmp_path / "b.nc").drop_vars("target_error_message")
    old["target_errors"].values[1] = 1
    write_dataset(old, tmp_path / "old.nc")
    both = combine(TinyFails(), [tmp_path / "a.nc", tmp_path / "old.nc"], write=False)
    assert [str(m) for m in both["target_error_message"].values] == msgs + ["", "not recorded"]
