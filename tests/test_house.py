"""The house rules of the package layout, checked on the source (deterministic checks).

* no import cycle among simkit's modules;
* the library never imports the application (no ``studies`` import in ``simkit/``), and no study
  imports another study;
* a module's underscore names are used only inside its own subpackage;
* the declared schema is enforced: an undeclared variable is refused, and "nat" is refused as a unit.
"""

from __future__ import annotations

import ast
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
            if (private or private_mod) and _subpackage(mod) != _subpackage(here):
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
