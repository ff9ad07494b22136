"""The PDF report of the C1 study (simkit.report), built from synthetic datasets with the schema of
``studies/rate_k.py`` (no simulation is run and no file outside pytest's ``tmp_path`` is read).

Deterministic tests: no false-failure rate applies.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import xarray as xr

from simkit.report import document as report
from simkit.report import spec
from simkit.report import format_pm, wrap_text
from simkit.report.rate_k import rate_k_report

ALPHA = 1e-3
#: one title page, four figure pages (two settings fit on one page each), one provenance page
PAGES = 6


def _attrs(long_name: str, units: str, description: str = "") -> dict:
    return {"long_name": long_name, "units": units, "description": description}


def synthetic(failed: bool = False) -> xr.Dataset:
    """Two settings on k = 1..1024 with plausible summaries; ``failed`` makes the second a failed cell."""
    rng = np.random.default_rng(12345)
    k = 2.0 ** np.arange(11)
    c1, c2 = np.array([5.5, 7.5]), np.array([-15.0, -26.0])
    gap = c1[:, None] / (k + 2.0)
    mcse = 2e-3 * gap / np.sqrt(k)
    k_min = np.array([64.0, 64.0])
    sel = k >= 64
    resid = np.where(sel, rng.standard_normal((2, k.size)), 50.0 / k)
    n_blocks = 8
    S, K = ("setting",), ("setting", "k")
    per_k = {
        "gap": (gap, _attrs("finite-k gap R_k - log k - CE", "1")),
        "gap_mcse": (mcse, _attrs("Monte Carlo standard error of gap", "1")),
        "gap_plain": (gap * 1.01, _attrs("gap without control variates", "1")),
        "gap_plain_mcse": (mcse * np.sqrt(k) * 5, _attrs("MCSE of gap_plain", "1")),
        "gap_exact": (np.vstack([gap[0] * 1.0001, np.full(k.size, np.nan)]), _attrs("exact gap", "1")),
        "k_gap": (gap * k, _attrs("k times gap", "1")),
        "k_gap_mcse": (mcse * k, _attrs("MCSE of k_gap", "1")),
        "fit_gap": (np.where(sel, gap, np.nan), _attrs("fitted gap", "1")),
        "resid_rate": (resid, _attrs("standardised residual of the rate fit", "1")),
        "resid_c1": (resid * 1.5, _attrs("standardised residual of the c1 fit", "1")),
    }
    per_setting = {
        "slope": [-1.0008, -0.9998], "slope_se": [4e-4, 2e-4], "slope_ci_low": [-1.0016, -1.0002],
        "slope_ci_high": [-1.0000, -0.9994], "slope_p_half": [1e-100, 1e-120], "slope_p_one": [0.05, 0.4],
        "slope_verdict_low": [-1.0022, -1.0005], "slope_verdict_high": [-0.9994, -0.9991],
        "slope_plain": [-0.9990, -0.9970], "slope_plain_se": [3e-4, 2e-4], "c1_estimate": [5.504, 7.49],
        "c1_estimate_mcse": [0.002, 0.02], "c2_estimate": list(c2), "c2_estimate_mcse": [9.0, 3.0],
        "c1_exact": list(c1), "c1_exact_mcse": [0.0, 0.003], "c1_z": [2.0, -0.5], "k_min": list(k_min),
    }
    ds = xr.Dataset(coords={"setting": ["uniform-d3", "vmf-d8"], "k": k.astype(np.int64),
                            "block": np.arange(n_blocks)})
    for coord, values in (("pi", ["uniform", "vmf"]), ("dim", [3, 8]), ("kappa_pi", [0.0, 2.0]),
                          ("kappa_m", [10.0, 10.0]), ("tau", [0.1, 0.2])):
        ds = ds.assign_coords({coord: (S, np.array(values))})
        ds[coord].attrs = _attrs(coord, "1")
    ds["k"].attrs = _attrs("number of negatives k", "1")
    ds["raw_gap_cv"] = (("setting", "block", "k"), gap[:, None, :] + rng.normal(0, 1e-3, (2, n_blocks, k.size)))
    for name, (values, attrs) in per_k.items():
        ds[name] = (K, np.asarray(values, dtype=float), attrs)
    for name, values in per_setting.items():
        ds[name] = (S, np.asarray(values, dtype=float), _attrs(name, "1"))
    ds["verdict"] = (S, np.array(["pass", "pass"]), _attrs(
        "verdict for C1", "1", f"pass, fail or error (a task failed); pass when the level-{1 - ALPHA:g} slope "
        f"interval contains -1, slope = -1/2 is rejected at {ALPHA:g}, and |c1_z| <= 3.29"))
    ds["verdict_reason"] = (S, np.array(["", ""]), _attrs("why a setting failed", "1"))
    ds["cell_error"] = (S, np.array(["", ""]), _attrs("error raised by a task of this cell", "1"))
    errors = []
    if failed:
        for name in list(per_k) + [n for n in per_setting if not n.startswith("c1_exact")]:
            ds[name][1] = np.nan
        ds["verdict"] = (S, np.array(["pass", "error"]), ds["verdict"].attrs)
        ds["verdict_reason"] = (S, np.array(["", "too few finished blocks (2)"]), ds["verdict_reason"].attrs)
        msg = "block 3: FloatingPointError: overflow in log-sum-exp"
        ds["cell_error"] = (S, np.array(["", msg]), ds["cell_error"].attrs)
        errors = [{"cell_index": 1, "cell": {"setting": "vmf-d8", "dim": 8}, "stage": "block", "block": b,
                   "seed": 20261130, "spawn_key": [1, 2, 3, 4, 1, b], "error": "FloatingPointError: overflow"}
                  for b in range(3, 9)]
    config = {"block_anchors": 16, "dim": None, "k_max": 1024, "k_min_factor": 16.0, "kappa_m": None,
              "n_blocks": n_blocks, "pilot_blocks": 2, "quick": True, "seed": 20261130,
              "settings": "uniform-d3,vmf-d8", "tau": None}
    ds.attrs = {
        "alpha": ALPHA, "title": "Claim C1: the finite-k InfoNCE bias decays as c1/k", "study": "rate_k",
        "claim": "C1", "simkit_version": "0.1.0", "git_commit": "0" * 40 + "-dirty", "seed": 20261130,
        "seed_scheme": "SeedSequence(seed, spawn_key=(*cell_key, stage, block))", "config": json.dumps(config),
        "package_versions": json.dumps({"python": "3.11", "numpy": "2.0"}), "platform": "test; 2 CPUs",
        "created": "2026-01-01T00:00:00+00:00", "wall_time_s": 1.5, "engine": "in-process", "n_workers": 1,
        "resumed_tasks": 0, "n_errors": len(errors), "errors": json.dumps(errors),
        "ademp": json.dumps({"aim": "C1", "data": "synthetic", "estimand": "gap_k", "methods": "WLS",
                             "performance": "slope, c1 z"}),
    }
    return ds


def n_pages(pdf: bytes) -> int:
    return len(re.findall(rb"/Type\s*/Page\b", pdf))


@pytest.fixture
def capture_tables(monkeypatch):
    """Record every table the report draws (header, rows)."""
    seen = []
    original = report.ReportDocument.table

    def table(self, header, rows, *args, **kwargs):
        seen.append((header, [list(r) for r in rows]))
        return original(self, header, rows, *args, **kwargs)

    monkeypatch.setattr(report.ReportDocument, "table", table)
    return seen


@pytest.mark.deterministic(reason="the report of one fixed dataset: a regression check of rendered values")
def test_report_from_dataset_on_disk(tmp_path, capture_tables):
    nc, pdf = tmp_path / "rate_k.nc", tmp_path / "out" / "rate_k.pdf"
    synthetic().to_netcdf(nc, engine="h5netcdf")
    with xr.open_dataset(nc, engine="h5netcdf") as ds:
        pages = rate_k_report(ds, pdf)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    assert pages == PAGES and n_pages(data) == PAGES
    assert len(data) < 500_000
    # atomic write: nothing but the report in its directory, no temporary file left behind
    assert sorted(p.name for p in pdf.parent.iterdir()) == ["rate_k.pdf"]
    header, rows = capture_tables[0]
    assert header[0] == "setting" and header[-1] == "verdict"
    assert [r[-1] for r in rows] == ["PASS", "PASS"]
    assert rows[0][header.index("slope ± jackknife SE")] == "−1.00080 ± 0.00040"
    assert rows[0][header.index("c1 estimate ± MCSE\nc1 exact ± MCSE")].endswith("\n5.5 (exact)")
    assert rows[0][header.index("t of c2")] == "n/a"  # not in this synthetic dataset: shown, not invented


def test_failed_cell_is_reported(tmp_path, capture_tables):
    pdf = tmp_path / "failed.pdf"
    pages = rate_k_report(synthetic(failed=True), pdf)
    data = pdf.read_bytes()
    # the six recorded errors may spill the provenance onto a second page (the table repeats its header)
    assert data.startswith(b"%PDF") and pages == n_pages(data) and PAGES <= pages <= PAGES + 1
    header, rows = capture_tables[0]
    failed = rows[1]
    assert failed[0] == "vmf-d8" and failed[-1] == "ERROR"
    assert failed[header.index("slope ± jackknife SE")] == "n/a"
    assert failed[header.index("c1 estimate ± MCSE\nc1 exact ± MCSE")].startswith("n/a\n")
    assert rows[0][-1] == "PASS"
    # the failure table on the title page gives the reason and the task error
    fail_header, fail_rows = capture_tables[1]
    assert fail_rows == [["vmf-d8", "error: too few finished blocks (2)",
                          "block 3: FloatingPointError: overflow in log-sum-exp"]]
    # the provenance lists the recorded errors with their seeds and spawn keys
    err_tables = [rows for header, rows in capture_tables if header and header[0] == "cell" and "error" in header]
    assert len(err_tables) == 1 and len(err_tables[0]) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["failed.pdf"]


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    """A report that raises half-way (after its title page) leaves neither a partial PDF nor a temporary
    file, and keeps an existing report intact."""
    pdf = tmp_path / "r.pdf"
    pdf.write_bytes(b"old report")

    def broken(*args):
        raise RuntimeError("drawing failed")

    monkeypatch.setattr(spec, "draw_panel", broken)
    with pytest.raises(RuntimeError, match="drawing failed"):
        rate_k_report(synthetic(), pdf)
    assert pdf.read_bytes() == b"old report"
    assert [p.name for p in tmp_path.iterdir()] == ["r.pdf"]


@pytest.mark.deterministic(reason="an error path; no tolerance")
def test_not_a_rate_k_dataset(tmp_path):
    with pytest.raises(ValueError, match=r"'ds' must be a rate_k dataset; it lacks 'gap', 'verdict'"):
        rate_k_report(synthetic().drop_vars(["gap", "verdict"]), tmp_path / "r.pdf")
    assert list(tmp_path.iterdir()) == []


def test_format_pm():
    assert format_pm(5.50394174, 0.00191133) == "5.5039 ± 0.0019"
    assert format_pm(-1.0008483, 0.00039009) == "−1.00085 ± 0.00039"
    assert format_pm(7.5, 0.0) == "7.5 (exact)"
    assert format_pm(123.4, 25.0) == "123 ± 25"
    assert format_pm(np.nan, 0.1) == "n/a"
    assert format_pm(2.0, np.nan) == "2 ± n/a"


def test_wrap_text_fits_width():
    text = "a long sentence " * 12 + "0123456789abcdef" * 4  # ends with a word wider than a line
    for size in (7.5, 9.0):
        lines = wrap_text(text, 2.0, size)
        assert len(lines) > 3
        assert all(report._width_in(line, size) <= 2.0 for line in lines)
        assert "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_auto_widths_fit_the_page_and_break_no_word():
    """Content widths: the columns fill the page; no word of any cell is broken; a narrow table keeps the
    proportions of its longest lines; more columns than fit give every column the same share of its words."""
    header = ["setting", "slope ± SE", "p-value of slope = −1/2"]
    rows = [["mixture-d16", "−0.99977 ± 0.00015", "1.2e−166"], ["uniform-d3", "[−1.0012, −0.9993]", "0.73"]]
    widths = report.auto_widths(header, rows, 6.0, 7.5)
    assert sum(widths) == pytest.approx(6.0)
    for row, weight in [(header, "bold")] + [(r, "normal") for r in rows]:  # a header is set in bold
        for cell, w in zip(row, widths):
            assert " ".join(wrap_text(cell, w - 0.1, 7.5, weight=weight)) == cell  # breaks fall between words
    bold, plain = (report._width_in("slope", 7.5, weight=w) for w in ("bold", "normal"))
    assert bold > plain  # the bold header is measured as drawn
    wide = report.auto_widths(None, [["a", "bb"]], 20.0, 7.5)
    line = [report._width_in(t, 7.5) for t in ("a", "bb")]
    assert wide[1] / wide[0] == pytest.approx((0.12 + line[1] / 0.96) / (0.12 + line[0] / 0.96))
    crowded = report.auto_widths(None, [["word"] * 40], 6.0, 7.5)
    assert crowded == pytest.approx([6.0 / 40] * 40)
