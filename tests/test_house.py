"""The house rules of the package layout, checked on the source (deterministic checks).

* no import cycle among simkit's modules;
* the library never imports the application (no ``studies`` import in ``simkit/``), and no study
  imports another study;
* a module's underscore names are used only inside its own subpackage;
* the declared schema is enforced: an undeclared variable is refused, and "nat" is refused as a unit;
* the code says what and why, not when: no issue number or ISO date in ``simkit/`` or ``studies/``, and
  no docstring longer than ``DOCSTRING_LINES`` lines (derivations live in docs/theory.md, measurements
  in docs/).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import simkit
from simkit.runner import UndeclaredVariable, Var, apply_schema

ROOT = Path(simkit.__file__).resolve().parent
STUDIES = ROOT.parent / "studies"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import in the file, at any depth (lazy imports count too)."""
    out = []
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and getattr(node.test, "id", "") == "TYPE_CHECKING" for b in node.body for n in ast.walk(b)}
    for node in ast.walk(tree):
        if id(node) in typing_only:  # annotations only: no import at run time
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, [a.name for a in node.names]))
    return out


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        deps = set()
        for mod, names in _imports(path):
            subs = [n for n in names if f"{mod}.{n}" in modules]  # "from simkit import exact": a module
            deps.update(f"{mod}.{n}" for n in subs)
            if mod in modules and (not names or len(subs) < len(names)):
                deps.add(mod)  # names defined in the module (or package __init__) itself
        graph[name] = deps - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Cycles found by depth-first search (a package importing its own submodules is no cycle)."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                cycle = stack[stack.index(m):] + [m]
                if not all(b.startswith(a + ".") for a, b in zip(cycle, cycle[1:])):
                    cycles.append(cycle)
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)
    return cycles


def test_no_import_cycle_in_simkit():
    cycles = _cycles(_graph())
    assert not cycles, cycles


def test_cycle_detection_positive_control():
    """The check above can fail: a cycle through a package's __init__ (a submodule doing
    ``from simkit import ...``) and a plain three-module cycle are both found."""
    assert _cycles({"p": {"p.a"}, "p.a": {"p"}}) == [["p", "p.a", "p"]]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"p": {"p.a", "p.b"}, "p.a": {"p.b"}, "p.b": set()}) == []


def test_library_imports_no_study_and_no_study_imports_another():
    for path in ROOT.rglob("*.py"):
        bad = [m for m, _ in _imports(path) if m == "studies" or m.startswith("studies.")]
        assert not bad, f"{path} imports {bad}"
    for path in STUDIES.glob("*.py"):
        bad = [m for m, names in _imports(path)
               if (m.startswith("studies.") or (m == "studies" and names))]
        assert not bad, f"{path} imports another study: {bad}"


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


#: private modules shared by the whole library (never by studies): the Numba cores and the argument checks
SHARED = ("simkit._jit", "simkit._checks")


def test_underscore_names_stay_inside_their_subpackage():
    """``from simkit.x import _y`` only from inside simkit.x's own subpackage (simkit's top level
    counts as one subpackage). The private package ``simkit._jit`` and module ``simkit._checks`` are
    shared library-wide, as scipy's ``_lib``; their underscore names still stay home, and studies use
    neither."""
    offences = []
    for path in [*ROOT.rglob("*.py"), *STUDIES.glob("*.py")]:
        here = _module_name(path) if path.is_relative_to(ROOT) else "studies"
        for mod, names in _imports(path):
            if not mod.startswith("simkit"):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            private_mod = any(p.startswith("_") for p in mod.split(".")[1:])
            if private_mod and not private and here != "studies" and mod.startswith(SHARED):
                continue  # simkit's shared private infrastructure, used across the library
            # a subpackage's __init__ (simkit.x) is inside simkit.x, not at simkit's top level
            home = here if path.name == "__init__.py" and here.count(".") == 1 else _subpackage(here)
            if (private or private_mod) and _subpackage(mod) != home:
                offences.append(f"{here}: from {mod} import {', '.join(private) or '...'}")
    assert not offences, "\n".join(offences)


def test_var_refuses_the_unit_nat():
    with pytest.raises(ValueError, match="udunits reads 'nat' as nano-technical-atmospheres"):
        Var(("k",), "gap", "nat", "in nats")
    with pytest.raises(ValueError, match="udunits reads"):
        Var(("k",), "gap", "nat2", "variance in nats")
    assert Var(("k",), "gap, in nats", "1", "").units == "1"


def test_apply_schema_refuses_undeclared_and_misdimensioned_variables():
    ds = xr.Dataset({"gap": (("setting", "k"), np.zeros((2, 3))), "extra": (("setting",), np.zeros(2))},
                    coords={"setting": ["a", "b"], "k": [1, 2, 4]})
    schema = {"gap": Var(("setting", "k"), "gap, in nats", "1", ""), "setting": Var(("setting",), "s", "1", ""),
              "k": Var(("k",), "k", "1", "")}
    with pytest.raises(UndeclaredVariable, match="not declared in the study's schema: extra"):
        apply_schema(ds.copy(), schema, "setting")
    wrong = {**schema, "extra": Var(("setting", "k"), "x", "1", "")}
    with pytest.raises(UndeclaredVariable, match="other dimensions than declared"):
        apply_schema(ds.copy(), wrong, "setting")
    ok = apply_schema(ds.copy(), {**schema, "extra": Var((None,), "x", "1", "d")}, "setting")
    assert ok["extra"].attrs == {"long_name": "x", "units": "1", "description": "d"}


#: an issue number ("issue" or "Issue #" followed by digits) or an ISO date (yyyy-mm-dd)
HISTORY = re.compile(r"\b[Ii]ssues? ?#?\d+|\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")
#: the longest docstring prose allowed (module, class or function), not counting the numpydoc reference
#: sections (Parameters, Returns, ...), which list what a signature needs; and the longest docstring in all
DOCSTRING_LINES = 25
DOCSTRING_TOTAL = 60
_REFERENCE_SECTIONS = {"Parameters", "Returns", "Yields", "Raises", "Attributes", "Other Parameters", "Warns"}
#: files whose hits are left to their own maintainers (the command line, calibration, diagnose and the
#: runner); an entry must be removed once its file is clean (test_exemptions_are_still_needed fails otherwise)
HISTORY_EXEMPT: set[str] = set()
DOCSTRING_EXEMPT: set[str] = set()


def _sources():
    for path in sorted([*ROOT.rglob("*.py"), *STUDIES.rglob("*.py")]):
        yield path.relative_to(ROOT.parent).as_posix(), path.read_text()


def _history_hits(source: str) -> list[str]:
    return [f"{i}: {line.strip()}" for i, line in enumerate(source.splitlines(), 1) if HISTORY.search(line)]


def _prose_lines(doc: str) -> int:
    """Lines of a docstring outside its numpydoc reference sections."""
    lines, n, skipping = doc.splitlines(), 0, False
    for i, line in enumerate(lines):
        underline = i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}
        if underline:
            skipping = line.strip() in _REFERENCE_SECTIONS
        if not skipping and not set(line.strip()) == {"-"}:
            n += 1
    return n


def _long_docstrings(source: str, limit: int = DOCSTRING_LINES, total: int = DOCSTRING_TOTAL) -> list[tuple[str, int]]:
    tree = ast.parse(source)
    nodes = [tree, *(n for n in ast.walk(tree)
                     if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    out = []
    for node in nodes:
        doc = ast.get_docstring(node)
        if doc is not None and (_prose_lines(doc) > limit or len(doc.splitlines()) > total):
            out.append((getattr(node, "name", "<module>"), len(doc.splitlines())))
    return out


def test_no_issue_number_or_date_in_library_or_studies():
    offences = [f"{name}:{hit}" for name, src in _sources() if name not in HISTORY_EXEMPT
                for hit in _history_hits(src)]
    assert not offences, "history belongs in CHANGELOG.md and commit messages:\n" + "\n".join(offences)


def test_no_long_docstring_in_library_or_studies():
    offences = [f"{name}:{obj} ({n} lines)" for name, src in _sources()
                for obj, n in _long_docstrings(src) if f"{name}:{obj}" not in DOCSTRING_EXEMPT]
    assert not offences, (f"docstrings over {DOCSTRING_LINES} lines of prose or {DOCSTRING_TOTAL} in all:\n"
                          + "\n".join(offences))


def test_exemptions_are_still_needed():
    sources = dict(_sources())
    clean = [n for n in HISTORY_EXEMPT if not _history_hits(sources[n])]
    clean += [e for e in DOCSTRING_EXEMPT
              if e.split(":")[1] not in {obj for obj, _ in _long_docstrings(sources[e.split(":")[0]])}]
    assert not clean, f"exempt but already clean, drop the entry: {clean}"


def test_history_and_docstring_checks_positive_control():
    """Both checks fail on synthetic sources that break them, and pass on their clean versions."""
    dirty = '''x = 1  # slower until the fix (issue 13)\ny = 2  # measured 2026-12-03\n# see Issue #4\n'''
    assert [h.split(":")[0] for h in _history_hits(dirty)] == ["1", "2", "3"]
    assert _history_hits("x = 1  # glibc 2.36, 1e-12, 12-03, d = 2026\n") == []
    body = "\n".join(f"    line {i}" for i in range(DOCSTRING_LINES))
    long_src = f'''"""Module.\n{body}\n"""\n\ndef f():\n    """One.\n{body}\n    """\n\nclass C:\n    """Short."""\n'''
    assert _long_docstrings(long_src) == [("<module>", DOCSTRING_LINES + 1), ("f", DOCSTRING_LINES + 1)]
    assert _long_docstrings(long_src, limit=DOCSTRING_LINES + 1) == []
    params = "\n".join(f"    x{i} : float\n        The {i}th." for i in range(20))
    numpydoc = f'''def g():\n    """Short.\n\n    Parameters\n    ----------\n{params}\n\n    Returns\n    -------\n    float\n    """\n'''
    assert _long_docstrings(numpydoc) == []  # 48 lines, 3 of prose
    assert _long_docstrings(numpydoc, total=40) == [("g", 48)]
