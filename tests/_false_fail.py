"""The false-failure register of the default suite (used by ``conftest.py`` and ``test_budget.py``).

A statistical test states the probability, over the choice of its fixed seed, that a *correct*
implementation fails it, as ``@pytest.mark.false_fail(rate, reason="...")``; the rate is what the
test's own threshold implies (its alpha, the exact tail of a binomial band, the two-sided normal
tail of a z bound, a Bonferroni or union bound over its comparisons). A test that draws random
numbers but cannot fail by chance says why with ``@pytest.mark.deterministic(reason="...")``.
The suite's false-failure probability is at most the sum of the rates (union bound, whatever the
dependence between tests), and ``test_budget.py`` holds that sum to the README's budget.
"""

from __future__ import annotations

import ast
import copy
import math
import re
from pathlib import Path

from simkit.stats.truth_tests import N_BOOT

BUDGET_LINE = re.compile(r"False-failure budget of the default suite:\s*\**\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)")

# A test function "draws random numbers" when its source, or that of a fixture or helper of the same
# module it takes as an argument, matches RNG; it "compares with a statistical tolerance" when its
# own source matches STAT. Both together, without a marker, is a forgotten statistical test.
RNG = re.compile(r"default_rng|\bGenerator\b|SeedSequence|\brng\b|\bseeds?\b|\.rvs\(|np\.random\.|run_study|\bcalibrate\(")
STAT = re.compile(r"p_?values?\b|\bpval|\balpha\b|\bALPHA\b|\.ppf\(|\.isf\(|\.sf\(|kstest|ks_2samp|"
                  r"chisquare|chi2|binom|\bcrit\w*|mcse|\bse\b|_se\b|\bz\b|\bt\b\s*[<>]|stats\.norm|"
                  r"stats\.t\b|sigma|standard error|\breject|verdict")
MARKS = ("false_fail", "deterministic")


def row(item) -> dict:
    """The register's view of one collected pytest item (JSON-serialisable)."""
    ff, det = item.get_closest_marker("false_fail"), item.get_closest_marker("deterministic")
    return {"nodeid": item.nodeid,
            "statistical": item.get_closest_marker("statistical") is not None,
            "false_fail": None if ff is None else {"args": list(ff.args), "kwargs": dict(ff.kwargs)},
            "deterministic": None if det is None else {"args": list(det.args), "kwargs": dict(det.kwargs)}}


def _reason(mark: dict) -> object:
    return mark["kwargs"].get("reason", mark["args"][1] if len(mark["args"]) > 1 else None)


def rate(r: dict) -> float:
    """The stated rate of one register row; ValueError unless it is a float in (0, 1) with a reason.

    ``false_fail(covered_by="test_other", reason=...)`` registers a test that can fail by chance only
    when ``test_other`` of the same file does (the same verdicts of the same dataset): it adds 0, and
    ``problems`` checks that ``test_other`` carries a rate."""
    ff = r["false_fail"]
    if not ff["args"] and "covered_by" in ff["kwargs"]:
        if not isinstance(ff["kwargs"]["covered_by"], str) or not isinstance(_reason(ff), str):
            raise ValueError(f"{r['nodeid']}: false_fail(covered_by='test_name', reason='...') needs both as strings")
        return 0.0
    args = ff["args"] if ff["args"] else [ff["kwargs"].get("rate")]
    value = args[0]
    if isinstance(value, bool) or not isinstance(value, float) or not (0.0 < value < 1.0) or math.isnan(value):
        raise ValueError(f"{r['nodeid']}: false_fail rate must be a float in (0, 1), got {value!r}")
    reason = _reason(ff)
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"{r['nodeid']}: false_fail needs reason='...' (what threshold implies the rate)")
    return value


def problems(rows: list[dict]) -> list[str]:
    """Rows that break the register's rules (every rate valid; statistical items registered; one
    marker per item; every deterministic marker gives its reason)."""
    out = []
    for r in rows:
        if r["false_fail"] is not None and r["deterministic"] is not None:
            out.append(f"{r['nodeid']}: carries both false_fail and deterministic")
        if r["statistical"] and r["false_fail"] is None and r["deterministic"] is None:
            out.append(f"{r['nodeid']}: marked statistical but has no false_fail(rate, reason=...) "
                       "or deterministic(reason=...) marker")
        if r["false_fail"] is not None:
            try:
                rate(r)
            except ValueError as exc:
                out.append(str(exc))
            cover = r["false_fail"]["kwargs"].get("covered_by")
            if cover is not None and not r["false_fail"]["args"]:
                prefix = f"{r['nodeid'].split('::')[0]}::{cover}"
                if not any((o["nodeid"] == prefix or o["nodeid"].startswith(prefix + "["))
                           and o["false_fail"] is not None and o["false_fail"]["args"] for o in rows):
                    out.append(f"{r['nodeid']}: covered_by={cover!r} names no test of its file with a rate")
        if r["deterministic"] is not None:
            reason = _reason({"args": [None, *r["deterministic"]["args"]], "kwargs": r["deterministic"]["kwargs"]})
            if not isinstance(reason, str) or not reason.strip():
                out.append(f"{r['nodeid']}: deterministic needs reason='...' (why it cannot fail by chance)")
    return out


def total(rows: list[dict]) -> float:
    """Sum of the registered rates (each validated)."""
    return math.fsum(rate(r) for r in rows if r["false_fail"] is not None)


def check_budget(rows: list[dict], budget: float) -> float:
    """Return the total; AssertionError naming the largest contributions when it exceeds ``budget``."""
    tot = total(rows)
    if not tot <= budget:
        top = sorted((r for r in rows if r["false_fail"] is not None), key=rate, reverse=True)[:10]
        lines = "\n".join(f"  {rate(r):.3g}  {r['nodeid']}" for r in top)
        raise AssertionError(f"registered false-failure rates sum to {tot:.4g} > budget {budget:g}; largest:\n{lines}")
    return tot


def read_budget(readme: str) -> float:
    found = BUDGET_LINE.findall(readme)
    if len(found) != 1:
        raise ValueError(f"README must state 'False-failure budget of the default suite: <number>' "
                         f"exactly once, found {len(found)}")
    return float(found[0])


def _marked(decorators: list[str], aliases: dict[str, str]) -> bool:
    for text in decorators:
        resolved = aliases.get(text.split("(")[0].strip(), text)
        if any(m in text or m in resolved for m in MARKS) or text.strip() == "pytest.mark.slow":
            return True
    return False


def unregistered(path: Path, pending: set[str] = frozenset()) -> list[str]:
    """Test functions of one file that draw random numbers and compare with a statistical tolerance
    but carry neither marker (nor are slow, nor are registered in ``conftest.PENDING``)."""
    src = path.read_text(encoding="utf-8")
    tree = ast.parse(src)
    aliases = {t.id: ast.get_source_segment(src, node.value) for node in tree.body if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name)}
    if any(m in aliases.get("pytestmark", "") for m in MARKS):
        return []
    helpers = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and not n.name.startswith("test_")}

    def draws(node: ast.FunctionDef, seen: set[str]) -> bool:
        if RNG.search(code(node)):
            return True
        names = {a.arg for a in node.args.args} | {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        return any(draws(helpers[n], seen | {n}) for n in names - seen if n in helpers)

    def code(node: ast.AST) -> str:
        """Source without prose (docstrings, messages: string constants with a space); keys such as
        ``ds["slope_se"]`` stay."""
        class Strip(ast.NodeTransformer):
            def visit_Constant(self, c):
                return ast.Constant("") if isinstance(c.value, str) and re.search(r"\s", c.value) else c
        return ast.unparse(Strip().visit(copy.deepcopy(node)))

    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    funcs += [m for c in tree.body if isinstance(c, ast.ClassDef) for m in c.body if isinstance(m, ast.FunctionDef)]
    out = []
    for node in funcs:
        if not node.name.startswith("test_") or f"{path.name}::{node.name}" in pending:
            continue
        if _marked([ast.get_source_segment(src, d) for d in node.decorator_list], aliases):
            continue
        if draws(node, {node.name}) and STAT.search(code(node)):
            out.append(f"{path.name}:{node.lineno}: {node.name}")
    return out


def null_pvalues(study, ds) -> dict[str, float]:
    """The component null tests of ``study``'s checks on ``ds`` (``Check.pvalues``) as
    ``{"<check index>:<claim>:<setting>:<test>": p}``.

    Under the claims each p-value is uniform, or super-uniform for a one-sided bound, so a test
    asserting ``p >= floor`` for all ``m`` of them fails by chance with probability at most
    ``m * floor`` (Bonferroni). It is the default suite's form of a quick design's verdicts: the
    verdicts reject at the study's alpha, which a test cannot lower; the floor detects what the
    verdicts detect once the discrepancy pushes a p-value below ``floor`` (for a two-sided t on
    ``n - 1`` df, a shift of ``t_{1 - floor/2, n - 1}`` standard errors with probability 1/2)."""
    out = {}
    for j, check in enumerate(study.checks):
        if getattr(check, "pvalues", None) is None:
            continue
        for test, entry in check.pvalues(ds).items():
            out[f"{j}:{check.claim}:{test}"] = float(entry[0])
    return out


#: a bootstrap max-t p-value (simkit.stats.truth_tests.max_t_test) is (1 + #exceedances)/(N_BOOT + 1), never below
#: 1/(N_BOOT + 1) = 1e-4: a floor of 1e-5 cannot fail it. Such a test fails at that minimum (no resample as extreme
#: as the data), which under the null has probability about BOOTSTRAP_RATE.
BOOTSTRAP_RATE = 1.0 / (N_BOOT + 1)
BOOTSTRAP_FLOOR = 1.5 * BOOTSTRAP_RATE
#: the component tests of Check.pvalues that are bootstrap max-t tests against the exact curve
BOOTSTRAP_TESTS = (":curve", ":dgap")


def below_floor(pvalues: dict[str, float], floor: float, bootstrap: tuple[str, ...] = ()) -> dict[str, float]:
    """The entries of ``pvalues`` below ``floor`` or not finite (a test that could not be made); entries whose
    name ends in one of ``bootstrap`` are bootstrap p-values, checked against :data:`BOOTSTRAP_FLOOR` instead."""
    def low(name: str, p: float) -> bool:
        return not (math.isfinite(p) and p >= (BOOTSTRAP_FLOOR if name.endswith(bootstrap) and bootstrap else floor))
    return {name: p for name, p in pvalues.items() if low(name, p)}
