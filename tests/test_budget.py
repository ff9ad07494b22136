"""One suite-wide false-failure budget (HOUSE.md, Tests).

Every statistical test of the default suite registers its false-failure rate with
``@pytest.mark.false_fail(rate, reason=...)`` (see ``tests/_false_fail.py``), and the sum over the
collected items — an upper bound on the probability that a correct implementation fails the suite
by chance, whatever the dependence between tests — must not exceed the budget the README states.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import _false_fail as ff
from conftest import PENDING

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TEST_FILES = sorted(p for p in TESTS.rglob("test_*.py") if "data" not in p.relative_to(TESTS).parts)


def _default_suite_rows(request, tmp_path) -> list[dict]:
    """Register rows of the default suite: this session's items when it is the whole default suite,
    else a fresh collection of it (a partial run must not check a partial sum)."""
    items = request.session.items
    files = {item.path for item in items}
    cfg = request.config
    if (cfg.getoption("markexpr") == "not slow" and not cfg.getoption("keyword")
            and files == set(TEST_FILES)):
        return [ff.row(item) for item in items]
    out = tmp_path / "register.json"
    # addopts replaced (no xdist workers for a collection), the default suite's selection restated
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-o", "addopts=", "--strict-markers", "-m", "not slow",
                           f"--false-fail-report={out}", str(TESTS)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def suite_rows(request, tmp_path_factory):
    return _default_suite_rows(request, tmp_path_factory.mktemp("budget"))


# the most the README may state: a CI failure is evidence of a defect, not a 1-in-3 coin
BUDGET_CEILING = 0.02


def test_readme_states_the_budget():
    """The README states one budget, at most BUDGET_CEILING (a larger one fails here, not silently)."""
    budget = ff.read_budget((ROOT / "README.md").read_text(encoding="utf-8"))
    assert 0.0 < budget <= BUDGET_CEILING, budget


def test_default_suite_within_budget(suite_rows):
    """The sum of the registered rates of the default suite is at most the README's budget."""
    budget = ff.read_budget((ROOT / "README.md").read_text(encoding="utf-8"))
    total = ff.check_budget(suite_rows, budget)
    n = sum(r["false_fail"] is not None for r in suite_rows)
    assert n > 0 and total > 0.0, "no test registered a false-failure rate"


def test_register_rules_hold(suite_rows):
    """Every rate is a float in (0, 1) with a reason; every ``statistical`` item is registered (a rate,
    or deterministic with a reason); no item carries both."""
    assert ff.problems(suite_rows) == []


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_no_forgotten_statistical_test(path):
    """A test that draws random numbers and compares with a statistical tolerance (p-values, alpha,
    quantiles, z/t bounds, MCSE multiples, binomial bands) carries ``false_fail`` or
    ``deterministic``; the scan is textual, so a false alarm is answered with ``deterministic`` and
    its reason."""
    assert ff.unregistered(path, set(PENDING)) == []


def test_pending_entries_name_existing_tests_and_are_not_doubled():
    """``conftest.PENDING`` names real test functions that do not carry the markers themselves."""
    for key in PENDING:
        name, func = key.split("::")
        src = (TESTS / name).read_text(encoding="utf-8")
        assert f"def {func}(" in src, key


# ----------------------------------------------------------------------------------------------
# positive and negative controls of the summing and of the scan, on synthetic register rows


def _row(nodeid, *args, statistical=True, det=None, **kwargs):
    return {"nodeid": nodeid, "statistical": statistical,
            "false_fail": None if not args and not kwargs else {"args": list(args), "kwargs": kwargs},
            "deterministic": det}


def test_a_budget_above_the_ceiling_is_refused():
    """Positive control of test_readme_states_the_budget: the README's former 0.35 is read and refused."""
    old = ff.read_budget("False-failure budget of the default suite: 0.35\n")
    assert old == 0.35 and not old <= BUDGET_CEILING


def test_null_pvalue_floor_helpers():
    """``below_floor`` flags p-values under the floor and non-finite ones; ``null_pvalues`` reads every check's
    ``pvalues`` (with the check's index, so two checks of one claim do not collide) and skips checks without."""
    assert set(ff.below_floor({"a": 0.5, "b": 1e-5, "c": 9.9e-6, "d": float("nan")}, 1e-5)) == {"c", "d"}
    assert ff.below_floor({"a": 0.5, "b": 1e-5}, 1e-5) == {}

    class Check:
        def __init__(self, claim, pv):
            self.claim, self.pvalues = claim, pv

    class Study:
        checks = (Check("C7", lambda ds: {"s:slope": (0.2, 1e-3)}),
                  Check("C7", lambda ds: {"s:slope": (0.3, 1e-3, "bound")}), Check("C1", None))

    assert ff.null_pvalues(Study(), None) == {"0:C7:s:slope": 0.2, "1:C7:s:slope": 0.3}


def test_rate_above_the_budget_fails_the_sum():
    rows = [_row("a", 1e-3, reason="alpha"), _row("b", 0.02, reason="too loose")]
    assert ff.total(rows) == pytest.approx(0.021)
    with pytest.raises(AssertionError, match=r"(?s)sum to 0\.021 > budget 0\.01.*0\.02  b"):
        ff.check_budget(rows, 0.01)
    assert ff.check_budget(rows[:1], 0.01) == pytest.approx(1e-3)


def test_budget_counts_parametrised_items_separately():
    rows = [_row(f"t[{i}]", 1e-3, reason="alpha") for i in range(11)]
    with pytest.raises(AssertionError):
        ff.check_budget(rows, 0.01)


@pytest.mark.parametrize("bad", [0.0, 1.0, -1e-3, float("nan"), 1, "0.001", True])
def test_invalid_rates_rejected(bad):
    with pytest.raises(ValueError, match="must be a float in"):
        ff.rate(_row("x", bad, reason="r"))
    assert ff.problems([_row("x", bad, reason="r")])


def test_missing_reasons_and_missing_registration_are_problems():
    assert ff.problems([_row("x", 1e-3)])[0].endswith("needs reason='...' (what threshold implies the rate)")
    assert "has no false_fail" in ff.problems([_row("y")])[0]
    assert ff.problems([_row("z", det={"args": [], "kwargs": {}})])
    assert "both" in ff.problems([_row("w", 1e-3, reason="a", det={"args": [], "kwargs": {"reason": "r"}})])[0]
    assert ff.problems([_row("v", det={"args": [], "kwargs": {"reason": "exact property"}})]) == []
    assert ff.problems([_row("u", statistical=False)]) == []


def test_covered_by_adds_nothing_and_must_name_a_rated_test():
    rows = [_row("tests/test_a.py::test_x[1]", 1e-3, reason="alpha"),
            _row("tests/test_a.py::test_y", covered_by="test_x", reason="same verdicts as test_x")]
    assert ff.total(rows) == pytest.approx(1e-3) and ff.problems(rows) == []
    orphan = [_row("tests/test_a.py::test_y", covered_by="test_z", reason="r")]
    assert "names no test of its file" in ff.problems(orphan)[0]
    assert ff.problems([_row("tests/test_a.py::test_y", covered_by="test_x")])  # no reason


def test_read_budget_needs_exactly_one_line():
    assert ff.read_budget("x\nFalse-failure budget of the default suite: 0.05 (union bound)\n") == 0.05
    assert ff.read_budget("False-failure budget of the default suite: **2e-2**") == 0.02
    with pytest.raises(ValueError, match="exactly once, found 0"):
        ff.read_budget("no budget here")


def test_scan_flags_an_unmarked_statistical_test(tmp_path):
    path = tmp_path / "test_synthetic.py"
    path.write_text(
        "import numpy as np\nimport pytest\nfrom scipy import stats\n\n"
        "def _draw(n):\n    return np.random.default_rng(1).normal(size=n)\n\n"
        "def test_forgotten():\n    x = _draw(100)\n    assert stats.ttest_1samp(x, 0).pvalue > 1e-3\n\n"
        "@pytest.mark.false_fail(1e-3, reason='alpha')\n"
        "def test_registered():\n    x = _draw(100)\n    assert stats.ttest_1samp(x, 0).pvalue > 1e-3\n\n"
        "@pytest.mark.deterministic(reason='exact identity')\n"
        "def test_exact():\n    rng = np.random.default_rng(2)\n    z = rng.normal()\n    assert z - z == 0\n\n"
        "def test_no_randomness():\n    assert 0.5 > 1e-3  # alpha\n")
    assert ff.unregistered(path) == [f"{path.name}:8: test_forgotten"]
    assert ff.unregistered(path, {f"{path.name}::test_forgotten"}) == []


@pytest.mark.deterministic(reason="a dictionary of given p-values; no random draw")
def test_bootstrap_p_values_are_checked_against_their_minimum():
    """A bootstrap max-t p-value is never below 1/(N_BOOT + 1) = 1e-4, so a 1e-5 floor cannot fail it; the floor
    check flags one at that minimum (positive control) and passes one just above it."""
    at_min = 1.0 / (ff.N_BOOT + 1)
    pv = {"0:C1:a:curve": at_min, "0:C1:a:dgap": 2.0 * at_min, "0:C1:a:slope": 0.5}
    assert ff.below_floor(pv, 1e-5) == {}  # the plain floor cannot see it
    assert ff.below_floor(pv, 1e-5, ff.BOOTSTRAP_TESTS) == {"0:C1:a:curve": at_min}
